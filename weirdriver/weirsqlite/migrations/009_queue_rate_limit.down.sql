-- Reverts 009: drops the queue's rate limit.
ALTER TABLE weir_queue DROP COLUMN rate_tat;
ALTER TABLE weir_queue DROP COLUMN rate_period_us;
ALTER TABLE weir_queue DROP COLUMN rate_limit;
