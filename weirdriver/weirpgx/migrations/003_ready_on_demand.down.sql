-- Back to the list always on: every writer waits (the lock on the job table)
-- while the jobs written with the list off get their rows, then the triggers
-- find no mode and write rows again. The functions keep their newest bodies,
-- which read a missing mode as on.
LOCK TABLE weir_job IN SHARE MODE;
SELECT weir_ready_repair();
DROP FUNCTION weir_ready_repair();
DROP SEQUENCE weir_ready_mode;
