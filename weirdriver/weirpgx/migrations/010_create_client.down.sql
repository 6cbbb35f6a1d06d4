-- Reverts 010: drops the client registry. Running clients of a weir that
-- knows it log one failed refresh each and go on working their jobs.
DROP TABLE weir_client;
