-- weir:compatible
-- A queue's limits (docs/flow-control.md), NULL when it has none:
--
-- global_limit: at most that many of its jobs running across every client on
-- the database. A claim locks the queue's row, so that the limited queue's
-- claims run one at a time, counts the queue's running jobs on a snapshot
-- taken after the lock (every earlier claim has committed or rolled back by
-- then), and claims at most the difference. A job stops counting when it stops
-- running, by whatever statement: an outcome, a rescue, a cancel. The count
-- walks the partial index of running jobs (weir_job_running_idx, every
-- queue's), which costs a limited claim as many index entries as jobs run in
-- the whole database; an index of running jobs by queue would make it
-- cheaper, at the price of one more index write at every claim of every queue.
--
-- rate_limit per rate_period_us microseconds: at most that many of its jobs
-- started per period, spread evenly. rate_tat is the limiter's state, the
-- generic cell rate algorithm's theoretical arrival time: when the next start
-- is due if starts came evenly, one every T = period/limit. Under the same
-- lock a claim admits k = floor((now - max(tat, now)) / T) + B jobs, B the
-- burst, 2 + what 10 ms of the rate allows (weirdriver.RateBurst), and moves
-- tat on by T for each job it leased. So in any interval of W by the claims'
-- clock (their now()), at most W/T + B jobs are claimed.
--
-- A queue without limits takes no lock and counts nothing.
ALTER TABLE weir_queue ADD COLUMN global_limit integer,
    ADD COLUMN rate_limit integer,
    ADD COLUMN rate_period_us bigint,
    ADD COLUMN rate_tat timestamptz,
    ADD CONSTRAINT weir_queue_global_limit_check CHECK (global_limit BETWEEN 1 AND 1000000),
    ADD CONSTRAINT weir_queue_rate_check CHECK (
        (rate_limit IS NULL AND rate_period_us IS NULL)
        OR (rate_limit BETWEEN 1 AND 1000000 AND rate_period_us BETWEEN 1000 AND 86400000000));

-- weir_ready_claim as in migration 011, with the limits. When a limit cuts the
-- claim short it returns, after the jobs it leased, one row whose id is NULL,
-- whose attempted_at is the claim's time and, when the rate limit cut it,
-- whose scheduled_at is when the next start is due: the caller learns that
-- the queue is at a limit, and until when, rather than out of jobs.
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
