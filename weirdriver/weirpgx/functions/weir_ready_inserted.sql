-- The ready list's rows of the available jobs a statement inserted (trigger
-- weir_job_ready_insert), with their key hints when their queue has limits per
-- key; none while the list is off (docs/design/storage.md). The mode is
-- weir_ready_mode's value modulo 4 (1 writing, 2 on, others off), read
-- without a snapshot: a sequence's value is not versioned, so a transaction
-- that began before the list was turned on reads it too. A schema without the
-- sequence (before migration 003) has the list on. The queue's settings are
-- read in the statement that writes the rows: a statement blocked by
-- weir_queue_set_key's lock on the list reads them after that lock is
-- released, so it sees the new key.
CREATE OR REPLACE FUNCTION weir_ready_inserted() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    IF coalesce(pg_sequence_last_value(to_regclass('weir_ready_mode')) % 4, 2) NOT IN (1, 2) THEN
        RETURN NULL;
    END IF;
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
