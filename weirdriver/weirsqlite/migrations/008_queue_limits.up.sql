-- weir:compatible
-- A queue's limits, as weirpgx's migration 012_queue_limits (NULL: none):
-- global_limit, at most that many of its jobs running across every client;
-- rate_limit per rate_period_us microseconds, at most that many started per
-- period, spread evenly, with rate_tat (microseconds since 1970) the
-- limiter's state. The claim, one writer at a time, counts the queue's running
-- jobs, keeps the limiter, and claims at most what both allow.
ALTER TABLE weir_queue ADD COLUMN global_limit INTEGER
    CONSTRAINT weir_queue_global_limit_check CHECK (global_limit BETWEEN 1 AND 1000000);
ALTER TABLE weir_queue ADD COLUMN rate_limit INTEGER
    CONSTRAINT weir_queue_rate_limit_check CHECK (rate_limit BETWEEN 1 AND 1000000);
ALTER TABLE weir_queue ADD COLUMN rate_period_us INTEGER
    CONSTRAINT weir_queue_rate_period_check CHECK (rate_period_us BETWEEN 1000 AND 86400000000);
ALTER TABLE weir_queue ADD COLUMN rate_tat INTEGER;
