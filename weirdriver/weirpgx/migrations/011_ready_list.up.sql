-- weir:compatible
-- The ready list: one row per available job, the path claims walk instead of
-- the job table (docs/storage.md). A claim deletes the rows it takes; the
-- maintenance leader truncates segments whose rows are mostly gone, which
-- removes their dead entries even while an old snapshot is held, where VACUUM
-- could not. A row is a hint: a claim checks the job itself, so a row whose job
-- is no longer available (cancelled, deleted, claimed by id) is only skipped.
--
-- Triggers on weir_job write the rows, so that every writer (weir of any
-- version, weir_enqueue, SQL of the user's own) keeps the list complete: an
-- insert of available jobs, and an update that makes a job available or moves
-- an available job in the claim order.
CREATE TABLE weir_ready (
    seg smallint NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL,
    scheduled_at timestamptz NOT NULL,
    job_id bigint NOT NULL
) PARTITION BY LIST (seg);

CREATE TABLE weir_ready_0 PARTITION OF weir_ready FOR VALUES IN (0);
CREATE TABLE weir_ready_1 PARTITION OF weir_ready FOR VALUES IN (1);
CREATE TABLE weir_ready_2 PARTITION OF weir_ready FOR VALUES IN (2);
CREATE TABLE weir_ready_3 PARTITION OF weir_ready FOR VALUES IN (3);

CREATE INDEX weir_ready_claim_idx ON weir_ready (queue, priority, scheduled_at, job_id);

-- The segment new rows go to: the second of the writing transaction's start,
-- modulo the segment count.
CREATE FUNCTION weir_ready_seg() RETURNS smallint
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (floor(extract(epoch FROM now()))::bigint % 4)::smallint;

-- The claim (weirpgx's JobClaim): takes up to n due rows of queue q from the
-- list in claim order, skipping rows another claim holds, unless the queue is
-- paused; deletes them; and leases for lease_us microseconds to client_id
-- those of their jobs that are still available in that queue and due (the
-- others' rows were stale hints). One statement, so that the rows it takes and
-- the jobs it leases are read on one snapshot. A new lease token is greater
-- than the job's last and at least the claim's time in microseconds since 1970
-- (docs/operations.md, "A primary and a replica"). The settings keep the plan
-- on the segments' indexes in order, the delete on each row's address and
-- the lease on the job's primary key, whatever the statistics say: a list or
-- a job table analyzed while nearly empty would otherwise make the planner
-- sort, hash or scan every row of a backlog at each claim. The CASE keeps the job table's index of available jobs out of it.
CREATE FUNCTION weir_ready_claim(q text, n integer, lease_us bigint, client_id text)
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

CREATE FUNCTION weir_ready_inserted() RETURNS trigger
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

CREATE TRIGGER weir_job_ready_insert AFTER INSERT ON weir_job
    REFERENCING NEW TABLE AS weir_inserted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION weir_ready_inserted();

CREATE FUNCTION weir_ready_updated() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id)
    VALUES (weir_ready_seg(), NEW.queue, NEW.priority, NEW.scheduled_at, NEW.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER weir_job_ready_update AFTER UPDATE OF state, queue, priority, scheduled_at ON weir_job
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND (OLD.state <> 'available' OR OLD.queue <> NEW.queue
        OR OLD.priority <> NEW.priority OR OLD.scheduled_at <> NEW.scheduled_at))
    EXECUTE FUNCTION weir_ready_updated();

-- Jobs available before this migration.
INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id)
SELECT weir_ready_seg(), queue, priority, scheduled_at, id FROM weir_job WHERE state = 'available';
