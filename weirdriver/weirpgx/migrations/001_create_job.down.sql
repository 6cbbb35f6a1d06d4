DROP TABLE weir_job;
DROP FUNCTION weir_state_bit(text);
