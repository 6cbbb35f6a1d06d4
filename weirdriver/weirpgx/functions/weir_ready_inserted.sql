-- The ready list's rows of the available jobs a statement inserted (trigger
-- weir_job_ready_insert), with their key hints when their queue has limits per
-- key. The queue's settings are read in the statement that writes the rows: a
-- statement blocked by weir_queue_set_key's lock on the list reads them after
-- that lock is released, so it sees the new key.
CREATE OR REPLACE FUNCTION weir_ready_inserted() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id, key)
    SELECT weir_ready_seg(), n.queue, n.priority, n.scheduled_at, n.id,
        CASE WHEN (SELECT EXISTS (SELECT 1 FROM weir_queue p WHERE p.key_source IS NOT NULL)) THEN
            (SELECT weir_job_key(p.key_source, p.key_path, n.args, n.metadata) FROM weir_queue p
            WHERE p.name = n.queue AND p.key_source IS NOT NULL)
        END
    FROM weir_inserted_jobs n WHERE n.state = 'available';
    RETURN NULL;
END
$$;
