-- weir:compatible
-- A queue's limit per key, as weirpgx's migration 013_key_limits (NULL:
-- none): key_limit, at most that many of its jobs with the same key running
-- across every client, a job's key being the value, as text, of the field
-- limit_key names ("args.customer_id", "metadata.tenant"), '' when missing or
-- null. The claim, one writer at a time, counts the running jobs of each key
-- and walks the queue's due jobs in claim order, taking each while its key
-- has a free slot.
ALTER TABLE weir_queue ADD COLUMN key_limit INTEGER
    CONSTRAINT weir_queue_key_limit_check CHECK (key_limit BETWEEN 1 AND 1000000);
ALTER TABLE weir_queue ADD COLUMN limit_key TEXT
    CONSTRAINT weir_queue_limit_key_check CHECK ((key_limit IS NULL) = (limit_key IS NULL));
