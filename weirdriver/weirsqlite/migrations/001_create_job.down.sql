-- weir:drops-jobs
-- Reverting this migration drops the job table with every job in it; the
-- migrator refuses while it holds jobs unless told to force it.

DROP TABLE weir_job;
