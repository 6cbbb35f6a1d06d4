DROP TRIGGER weir_job_ready_update ON weir_job;
DROP TRIGGER weir_job_ready_insert ON weir_job;
DROP FUNCTION weir_ready_updated();
DROP FUNCTION weir_ready_inserted();
DROP FUNCTION weir_ready_claim(text, integer, bigint, text);
DROP FUNCTION weir_ready_seg();
DROP TABLE weir_ready;
