-- Reverts 012: weir_ready_claim as migration 011 made it, and no queue limits.
CREATE OR REPLACE FUNCTION weir_ready_claim(q text, n integer, lease_us bigint, client_id text)
    RETURNS SETOF weir_job
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET enable_sort = off
    SET enable_bitmapscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off
    SET enable_seqscan = off
AS $$
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id FROM weir_ready r
        WHERE r.queue = q AND r.scheduled_at <= now()
            AND NOT EXISTS (SELECT 1 FROM weir_queue p WHERE p.name = q AND p.paused_at IS NOT NULL)
        ORDER BY r.priority, r.scheduled_at, r.job_id
        LIMIT n
        FOR UPDATE OF r SKIP LOCKED
    ),
    dropped AS (
        DELETE FROM weir_ready r USING picked p WHERE r.tableoid = p.part AND r.ctid = p.row_id
    )
    UPDATE weir_job j SET
        state = 'running',
        attempt = j.attempt + 1,
        lease_token = greatest(j.lease_token + 1, (extract(epoch FROM now()) * 1000000)::bigint),
        lease_expires_at = now() + lease_us * interval '1 microsecond',
        attempted_at = now(),
        attempted_by = client_id
    WHERE j.id = ANY(ARRAY(SELECT picked.job_id FROM picked))
        AND CASE WHEN j.state = 'available' AND j.queue = q AND j.scheduled_at <= now() THEN true ELSE false END
    RETURNING j.*;
END
$$;

ALTER TABLE weir_queue DROP CONSTRAINT weir_queue_rate_check, DROP CONSTRAINT weir_queue_global_limit_check,
    DROP COLUMN rate_tat, DROP COLUMN rate_period_us, DROP COLUMN rate_limit, DROP COLUMN global_limit;
