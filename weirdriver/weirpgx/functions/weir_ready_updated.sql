-- The ready list's row of a job that an update made available or moved in the
-- claim order (trigger weir_job_ready_update), with its key hint when its
-- queue has limits per key; none while the list is off (see
-- weir_ready_inserted).
CREATE OR REPLACE FUNCTION weir_ready_updated() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    IF coalesce(pg_sequence_last_value(to_regclass('weir_ready_mode')) % 4, 2) NOT IN (1, 2) THEN
        RETURN NULL;
    END IF;
    INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id, key)
    SELECT weir_ready_seg(), NEW.queue, NEW.priority, NEW.scheduled_at, NEW.id,
        (SELECT weir_job_key(p.key_source, p.key_path, NEW.args, NEW.metadata) FROM weir_queue p
        WHERE p.name = NEW.queue AND p.key_source IS NOT NULL);
    RETURN NULL;
END
$$;
