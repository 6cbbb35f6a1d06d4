-- weir:drops-data weir_job weir_periodic weir_queue
-- Reverting the baseline drops every table of weir's. Those named above hold
-- what users wrote (jobs with their outputs, periodic schedules, queue pauses
-- and limits): the migrator refuses while any of them has rows unless told to
-- force it. The others hold state weir rebuilds.

DROP TABLE weir_queue_share;
DROP TABLE weir_key_rate;
DROP TABLE weir_client;
DROP TABLE weir_periodic;
DROP TABLE weir_queue;
DROP TABLE weir_leader;
DROP TABLE weir_job;
