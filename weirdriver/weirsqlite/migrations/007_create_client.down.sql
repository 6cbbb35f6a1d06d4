-- Reverts 007: drops the client registry.
DROP TABLE weir_client;
