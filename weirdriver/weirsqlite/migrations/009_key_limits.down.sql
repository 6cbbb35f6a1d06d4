-- Reverts 009: no key limits.
ALTER TABLE weir_queue DROP COLUMN limit_key;
ALTER TABLE weir_queue DROP COLUMN key_limit;
