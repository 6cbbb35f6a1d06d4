-- weir:drops-jobs
-- Reverting the baseline drops every table of weir's, the job table with every
-- job in it; the migrator refuses while it holds jobs unless told to force it.

DROP TABLE weir_queue_share;
DROP TABLE weir_key_rate;
DROP TABLE weir_client;
DROP TABLE weir_periodic;
DROP TABLE weir_queue;
DROP TABLE weir_leader;
DROP TABLE weir_job;
