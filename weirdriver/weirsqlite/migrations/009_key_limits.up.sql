-- weir:compatible
-- A queue's limits per key, as weirpgx's migration 013_key_limits (NULL:
-- none): key_limit, at most that many of its jobs with the same key running
-- across every client, and key_rate per key_rate_period_us, at most that many
-- started per period, spread evenly, a job's key being the value, as text,
-- of the field limit_key names ("args.customer_id", "metadata.tenant"), ''
-- when missing or null; weir_key_rate holds each key's rate limiter (its
-- theoretical arrival time, µs since 1970). The claim, one writer at a time,
-- counts the running jobs of each key and walks the queue's due jobs in claim
-- order, taking each while its key has a free slot and its rate admits one.
ALTER TABLE weir_queue ADD COLUMN key_limit INTEGER
    CONSTRAINT weir_queue_key_limit_check CHECK (key_limit BETWEEN 1 AND 1000000);
ALTER TABLE weir_queue ADD COLUMN key_rate INTEGER
    CONSTRAINT weir_queue_key_rate_check CHECK (key_rate BETWEEN 1 AND 1000000);
ALTER TABLE weir_queue ADD COLUMN key_rate_period_us INTEGER
    CONSTRAINT weir_queue_key_rate_period_check CHECK (key_rate_period_us BETWEEN 1000 AND 86400000000);
ALTER TABLE weir_queue ADD COLUMN limit_key TEXT
    CONSTRAINT weir_queue_limit_key_check CHECK ((limit_key IS NULL) = (key_limit IS NULL AND key_rate IS NULL)
        AND (key_rate IS NULL) = (key_rate_period_us IS NULL));

CREATE TABLE weir_key_rate (
    queue TEXT NOT NULL,
    key TEXT NOT NULL,
    tat INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
);
