-- weir:compatible
-- Periodic jobs: one row per schedule, which the maintenance leader registers
-- from its Config.PeriodicJobs and fires. A fire inserts the slot's job and moves
-- next_run_at in one transaction that holds the row, so each slot fires once
-- (docs/periodic.md). A schedule the leader does not declare is marked
-- orphaned_at and kept until an operator deletes it.
CREATE TABLE weir_periodic (
    name text PRIMARY KEY,
    spec text NOT NULL,
    time_zone text NOT NULL,
    next_run_at timestamptz NOT NULL,
    last_run_at timestamptz,
    last_job_id bigint,
    declared_by text NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now(),
    paused_at timestamptz,
    orphaned_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT weir_periodic_name_check CHECK (char_length(name) BETWEEN 1 AND 128)
);
