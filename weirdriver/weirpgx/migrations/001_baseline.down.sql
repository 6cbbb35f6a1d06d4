-- weir:drops-data weir_job weir_periodic weir_queue
-- Reverting the baseline drops every table of weir's. Those named above hold
-- what users wrote (jobs with their outputs, periodic schedules, queue pauses
-- and limits): the migrator refuses while any of them has rows unless told to
-- force it. The others hold state weir rebuilds.

DROP TRIGGER weir_job_ready_update ON weir_job;
DROP TRIGGER weir_job_ready_insert ON weir_job;
DROP FUNCTION weir_ready_claim(text, integer, bigint, text);
DROP FUNCTION weir_ready_claim(text, integer, bigint, text, integer[], text[], boolean);
DROP FUNCTION weir_queue_set_key(text, integer, integer, bigint, text, text[]);
DROP FUNCTION weir_ready_updated();
DROP FUNCTION weir_ready_inserted();
DROP TABLE weir_key_holder, weir_key_share, weir_queue_share, weir_key_rate, weir_key_scan;
DROP TABLE weir_ready;
DROP FUNCTION weir_key_bucket(text);
DROP FUNCTION weir_job_key(text, text[], jsonb, jsonb);
DROP FUNCTION weir_ready_seg();
DROP TABLE weir_client, weir_periodic;
DROP FUNCTION weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb, boolean, boolean, interval, text[], integer, text[], text);
DROP FUNCTION weir_unique_args_key(bytea, jsonb);
DROP FUNCTION weir_unique_prefix(text, text, timestamptz, boolean, bigint);
DROP TABLE weir_queue, weir_leader;
DROP TABLE weir_job;
DROP FUNCTION weir_state_bit(text);
