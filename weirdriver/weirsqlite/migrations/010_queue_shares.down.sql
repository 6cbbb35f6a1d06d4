-- Reverts 010.
DROP TABLE weir_queue_share;
