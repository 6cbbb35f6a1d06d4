-- Reverts 013: the triggers as migration 011 made them, weir_ready_claim as
-- migration 012 made it, and no key limits.
CREATE OR REPLACE FUNCTION weir_ready_inserted() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id)
    SELECT weir_ready_seg(), n.queue, n.priority, n.scheduled_at, n.id
    FROM weir_inserted_jobs n WHERE n.state = 'available';
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION weir_ready_updated() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id)
    VALUES (weir_ready_seg(), NEW.queue, NEW.priority, NEW.scheduled_at, NEW.id);
    RETURN NULL;
END
$$;

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
DECLARE
    lim integer;
    rate integer;
    paused boolean;
    period_us bigint;
    tat timestamptz;
    t_us double precision;
    burst integer;
    k integer;
    busy bigint;
    got bigint := 0;
    capped boolean := false;
    rate_capped boolean := false;
    marker weir_job;
BEGIN
    -- The queue's settings, read once: a paused queue gives nothing.
    SELECT p.global_limit, p.rate_limit, p.paused_at IS NOT NULL INTO lim, rate, paused
    FROM weir_queue p WHERE p.name = q;
    IF lim IS NOT NULL OR rate IS NOT NULL THEN
        -- Read again under the lock: the settings may have changed meanwhile.
        SELECT p.global_limit, p.rate_limit, p.rate_period_us, p.rate_tat, p.paused_at IS NOT NULL
        INTO lim, rate, period_us, tat, paused
        FROM weir_queue p WHERE p.name = q FOR NO KEY UPDATE;
    END IF;
    IF paused THEN
        RETURN;
    END IF;
    IF lim IS NOT NULL THEN
        SELECT count(*) INTO busy FROM weir_job j WHERE j.queue = q AND j.state = 'running';
        IF lim - busy < n THEN
            capped := true;
            n := greatest(lim - busy, 0);
        END IF;
    END IF;
    IF rate IS NOT NULL THEN
        t_us := period_us::double precision / rate;
        burst := 2 + floor(rate * 10000.0 / period_us)::integer;
        tat := greatest(coalesce(tat, now()), now());
        k := greatest(floor(extract(epoch FROM now() - tat) * 1000000 / t_us)::integer + burst, 0);
        IF k < n THEN
            capped := true;
            rate_capped := true;
            n := k;
        END IF;
    END IF;
    IF n > 0 THEN
        RETURN QUERY
        WITH picked AS (
            SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id FROM weir_ready r
            WHERE r.queue = q AND r.scheduled_at <= now()
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
        GET DIAGNOSTICS got = ROW_COUNT;
    END IF;
    IF rate IS NOT NULL THEN
        tat := tat + got * t_us * interval '1 microsecond';
        UPDATE weir_queue p SET rate_tat = tat WHERE p.name = q;
    END IF;
    IF capped THEN
        marker.attempted_at := now();
        IF rate_capped THEN
            marker.scheduled_at := tat - (burst - 1) * t_us * interval '1 microsecond';
        END IF;
        RETURN NEXT marker;
    END IF;
END
$$;

DROP FUNCTION weir_queue_set_key(text, integer, integer, bigint, text, text[]);
DROP TABLE weir_key_rate;
DROP TABLE weir_key_scan;
DROP FUNCTION weir_job_key(text, text[], jsonb, jsonb);
DROP INDEX weir_ready_key_idx;
ALTER TABLE weir_ready DROP COLUMN key;
ALTER TABLE weir_queue DROP CONSTRAINT weir_queue_key_limit_check,
    DROP COLUMN key_limit, DROP COLUMN key_source, DROP COLUMN key_path,
    DROP COLUMN key_rate, DROP COLUMN key_rate_period_us;
