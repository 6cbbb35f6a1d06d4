-- Reverts 008: drops the queue's limits.
ALTER TABLE weir_queue DROP COLUMN rate_tat;
ALTER TABLE weir_queue DROP COLUMN rate_period_us;
ALTER TABLE weir_queue DROP COLUMN rate_limit;
ALTER TABLE weir_queue DROP COLUMN global_limit;
