-- Reverts 019: the holders of buckets say no more what they want.
ALTER TABLE weir_key_holder DROP COLUMN want;
