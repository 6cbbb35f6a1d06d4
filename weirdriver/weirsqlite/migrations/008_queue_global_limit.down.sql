-- Reverts 008: drops the queue's global limit.
ALTER TABLE weir_queue DROP COLUMN global_limit;
