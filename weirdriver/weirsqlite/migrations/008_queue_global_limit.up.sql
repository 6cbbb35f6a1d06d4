-- weir:compatible
-- A queue's global limit: at most global_limit of its jobs running across every
-- client on the database (docs/flow-control.md). NULL: no limit. The claim,
-- one writer at a time, counts the queue's running jobs and claims at most the
-- difference.
ALTER TABLE weir_queue ADD COLUMN global_limit INTEGER
    CONSTRAINT weir_queue_global_limit_check CHECK (global_limit BETWEEN 1 AND 1000000);
