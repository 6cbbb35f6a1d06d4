-- Adds a row to the ready list for each available job that has none under its
-- claim order, with its key hint, and returns how many: the jobs written while
-- the list was off (docs/design/storage.md), or while the triggers did not
-- fire (a restore with triggers disabled, a replica applying changes). It
-- reads the job table's index of available jobs.
CREATE OR REPLACE FUNCTION weir_ready_repair() RETURNS bigint
    LANGUAGE sql
    SET search_path FROM CURRENT
BEGIN ATOMIC
    WITH added AS (
        INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id, key)
        SELECT weir_ready_seg(), j.queue, j.priority, j.scheduled_at, j.id,
            (SELECT weir_job_key(p.key_source, p.key_path, j.args, j.metadata) FROM weir_queue p
            WHERE p.name = j.queue AND p.key_source IS NOT NULL)
        FROM weir_job j
        WHERE j.state = 'available' AND NOT EXISTS (SELECT 1 FROM weir_ready r
            WHERE r.queue = j.queue AND r.priority = j.priority AND r.scheduled_at = j.scheduled_at
                AND r.job_id = j.id)
        RETURNING 1
    )
    SELECT count(*) FROM added;
END;
