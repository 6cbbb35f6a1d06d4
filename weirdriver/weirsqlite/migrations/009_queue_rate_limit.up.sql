-- weir:compatible
-- A queue's rate limit, as weirpgx's migration 013_queue_rate_limit: at most
-- rate_limit of its jobs started per rate_period_us microseconds, spread
-- evenly; rate_tat (microseconds since 1970) is the limiter's state. NULL: no
-- limit. The claim, one writer at a time, keeps it.
ALTER TABLE weir_queue ADD COLUMN rate_limit INTEGER
    CONSTRAINT weir_queue_rate_limit_check CHECK (rate_limit BETWEEN 1 AND 1000000);
ALTER TABLE weir_queue ADD COLUMN rate_period_us INTEGER
    CONSTRAINT weir_queue_rate_period_check CHECK (rate_period_us BETWEEN 1000 AND 86400000000);
ALTER TABLE weir_queue ADD COLUMN rate_tat INTEGER;
