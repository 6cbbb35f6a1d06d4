-- weir:compatible
-- Periodic jobs: one row per schedule, which the maintenance leader registers
-- from its Config.PeriodicJobs and fires (docs/periodic.md). Times are
-- microseconds since the Unix epoch.
CREATE TABLE weir_periodic (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    time_zone TEXT NOT NULL,
    next_run_at INTEGER NOT NULL,
    last_run_at INTEGER,
    last_job_id INTEGER,
    declared_by TEXT NOT NULL,
    declared_at INTEGER NOT NULL,
    paused_at INTEGER,
    orphaned_at INTEGER,
    created_at INTEGER NOT NULL,

    CONSTRAINT weir_periodic_name_check CHECK (length(name) BETWEEN 1 AND 128)
) STRICT;
