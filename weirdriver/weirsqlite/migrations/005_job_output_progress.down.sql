-- Reverts 005: drops the output and progress columns, and what they held.
ALTER TABLE weir_job DROP COLUMN output;
ALTER TABLE weir_job DROP COLUMN progress;
