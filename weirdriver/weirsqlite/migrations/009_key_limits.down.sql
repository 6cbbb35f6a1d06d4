-- Reverts 009: no limits per key.
DROP TABLE weir_key_rate;
ALTER TABLE weir_queue DROP COLUMN limit_key;
ALTER TABLE weir_queue DROP COLUMN key_rate_period_us;
ALTER TABLE weir_queue DROP COLUMN key_rate;
ALTER TABLE weir_queue DROP COLUMN key_limit;
