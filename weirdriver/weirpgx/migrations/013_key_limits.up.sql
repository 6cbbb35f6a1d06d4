-- weir:compatible
-- A queue's limit per key (docs/flow-control.md), NULL when it has none:
-- key_limit, at most that many of its jobs with the same key running across
-- every client on the database, a job's key being the value, as text, of the
-- field key_path of its args or metadata (key_source), '' when the field is
-- missing or null (weir_job_key).
--
-- The claim keeps it as it keeps the global limit, under the same lock on the
-- queue's row: it counts the running jobs of each key on a snapshot taken
-- after the lock, and takes a job only while its key has a free slot. To find
-- the jobs of keys with free slots behind a backlog of keys without, the
-- ready list carries a hint of each row's key (weir_ready.key, NULL in a
-- queue without a key limit), indexed for a skip scan over the keys. The hint
-- only finds rows: the claim counts each job under the key of its own args.
ALTER TABLE weir_queue ADD COLUMN key_limit integer,
    ADD COLUMN key_source text,
    ADD COLUMN key_path text[],
    ADD CONSTRAINT weir_queue_key_limit_check CHECK (
        (key_limit IS NULL AND key_source IS NULL AND key_path IS NULL)
        OR (key_limit BETWEEN 1 AND 1000000 AND key_source IN ('args', 'metadata')
            AND cardinality(key_path) BETWEEN 1 AND 8));

ALTER TABLE weir_ready ADD COLUMN key text;
CREATE INDEX weir_ready_key_idx ON weir_ready (queue, key, priority, scheduled_at, job_id) WHERE key IS NOT NULL;

-- A job's key under a key limit of the field path of its source.
CREATE FUNCTION weir_job_key(source text, path text[], args jsonb, metadata jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN coalesce(CASE source WHEN 'args' THEN args #>> path ELSE metadata #>> path END, '');

-- The triggers of migration 011, writing the key hint of rows in a queue with
-- a key limit. The queue's settings are read in the statement that writes the
-- rows: a statement blocked by weir_queue_set_key's lock on the list reads
-- them after that lock is released, so it sees the new key.
CREATE OR REPLACE FUNCTION weir_ready_inserted() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id, key)
    SELECT weir_ready_seg(), n.queue, n.priority, n.scheduled_at, n.id,
        CASE WHEN (SELECT EXISTS (SELECT 1 FROM weir_queue p WHERE p.key_limit IS NOT NULL)) THEN
            (SELECT weir_job_key(p.key_source, p.key_path, n.args, n.metadata) FROM weir_queue p
            WHERE p.name = n.queue AND p.key_limit IS NOT NULL)
        END
    FROM weir_inserted_jobs n WHERE n.state = 'available';
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION weir_ready_updated() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id, key)
    SELECT weir_ready_seg(), NEW.queue, NEW.priority, NEW.scheduled_at, NEW.id,
        (SELECT weir_job_key(p.key_source, p.key_path, NEW.args, NEW.metadata) FROM weir_queue p
        WHERE p.name = NEW.queue AND p.key_limit IS NOT NULL);
    RETURN NULL;
END
$$;

-- Sets queue q's key limit (lim NULL: none) and, when its key changed,
-- rewrites the hints of the queue's rows in the list. The lock on the list
-- waits for every transaction that wrote rows to it, which may have read the
-- old settings, and holds off new writers until this one commits: every row
-- is then written either with the new key or before the rewrite. It is taken
-- only when the key changes, which a client's Start that declares the same
-- limit again does not do.
CREATE FUNCTION weir_queue_set_key(q text, lim integer, source text, path text[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
DECLARE
    old_source text;
    old_path text[];
    old_limit integer;
BEGIN
    INSERT INTO weir_queue AS p (name) VALUES (q) ON CONFLICT (name) DO NOTHING;
    SELECT p.key_source, p.key_path, p.key_limit INTO old_source, old_path, old_limit
    FROM weir_queue p WHERE p.name = q FOR UPDATE;
    UPDATE weir_queue p SET key_limit = lim, key_source = CASE WHEN lim IS NULL THEN NULL ELSE source END,
        key_path = CASE WHEN lim IS NULL THEN NULL ELSE path END, updated_at = now()
    WHERE p.name = q;
    IF (lim IS NULL) <> (old_limit IS NULL)
        OR (lim IS NOT NULL AND (source IS DISTINCT FROM old_source OR path IS DISTINCT FROM old_path)) THEN
        LOCK TABLE weir_ready IN SHARE ROW EXCLUSIVE MODE;
        UPDATE weir_ready r SET key = CASE WHEN lim IS NULL THEN NULL
            ELSE weir_job_key(source, path, j.args, j.metadata) END
        FROM weir_job j WHERE r.queue = q AND j.id = r.job_id;
    END IF;
END
$$;

-- weir_ready_claim as in migration 012, with the key limit. The sorts of a
-- keyed claim's candidates, which the settings cost as disabled, would
-- otherwise have PostgreSQL compile them (JIT) at every claim: 300 ms each.
CREATE OR REPLACE FUNCTION weir_ready_claim(q text, n integer, lease_us bigint, client_id text)
    RETURNS SETOF weir_job
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET enable_sort = off
    SET enable_bitmapscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off
    SET enable_seqscan = off
    SET jit = off
AS $$
DECLARE
    lim integer;
    rate integer;
    key_lim integer;
    key_src text;
    key_path text[];
    busy_keys jsonb;
    taken jsonb := '{}';
    cand record;
    seen integer := 0;
    used integer;
    picked_ids bigint[] := '{}';
    drop_parts oid[] := '{}';
    drop_rows tid[] := '{}';
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
    SELECT p.global_limit, p.rate_limit, p.key_limit, p.paused_at IS NOT NULL INTO lim, rate, key_lim, paused
    FROM weir_queue p WHERE p.name = q;
    IF lim IS NOT NULL OR rate IS NOT NULL OR key_lim IS NOT NULL THEN
        -- The queue's claims take turns under a transaction-level advisory
        -- lock named after the schema and the queue, held until the claim
        -- commits. Unlike a lock on the queue's row, it writes nothing: a
        -- claim that finds no free slot stays read-only and commits without
        -- a WAL flush. Read the settings again under it: they may have
        -- changed meanwhile.
        PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || q, 0));
        SELECT p.global_limit, p.rate_limit, p.rate_period_us, p.rate_tat, p.key_limit, p.key_source, p.key_path,
            p.paused_at IS NOT NULL
        INTO lim, rate, period_us, tat, key_lim, key_src, key_path, paused
        FROM weir_queue p WHERE p.name = q;
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
    IF n > 0 AND key_lim IS NOT NULL THEN
        -- The running jobs of each key, counted, like the global limit's, on
        -- a snapshot taken after the lock; taken counts the jobs this claim
        -- takes, by key (a small object: busy_keys may hold thousands).
        SELECT coalesce(jsonb_object_agg(b.k, b.c), '{}') INTO busy_keys FROM (
            SELECT weir_job_key(key_src, key_path, j.args, j.metadata) AS k, count(*) AS c
            FROM weir_job j WHERE j.queue = q AND j.state = 'running' GROUP BY 1) b;
        -- First the head of the queue: its first 4n + 500 due rows in claim
        -- order. Those whose key hint names a key without a free slot are
        -- passed over on the list alone (counted, for the claim's answer);
        -- each of the rest is taken while its job's key (the truth, not the
        -- hint) has a free slot.
        FOR cand IN
            SELECT c.part, c.row_id, c.job_id, j.id AS available,
                weir_job_key(key_src, key_path, j.args, j.metadata) AS k, c.window_rows, c.window_full
            FROM (SELECT h.*, count(*) OVER () AS window_rows, count(*) FILTER (WHERE h.full_hint) OVER () AS window_full
                FROM (SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id, r.priority, r.scheduled_at,
                        r.key IS NOT NULL AND coalesce((busy_keys ->> r.key)::integer, 0) >= key_lim AS full_hint
                    FROM weir_ready r WHERE r.queue = q AND r.scheduled_at <= now()
                    ORDER BY r.priority, r.scheduled_at, r.job_id LIMIT 4 * n + 500) h) c
            LEFT JOIN weir_job j ON j.id = c.job_id
                AND CASE WHEN j.state = 'available' AND j.queue = q AND j.scheduled_at <= now() THEN true ELSE false END
            WHERE NOT c.full_hint
            ORDER BY c.priority, c.scheduled_at, c.job_id
        LOOP
            seen := cand.window_rows;
            capped := capped OR cand.window_full > 0;
            IF cand.available IS NULL OR cand.job_id = ANY(picked_ids) THEN
                drop_parts := drop_parts || cand.part; -- a stale hint, or a second
                drop_rows := drop_rows || cand.row_id;
            ELSIF cardinality(picked_ids) < n THEN
                used := coalesce((busy_keys ->> cand.k)::integer, 0) + coalesce((taken ->> cand.k)::integer, 0);
                IF used >= key_lim THEN
                    capped := true;
                ELSE
                    taken := jsonb_set(taken, ARRAY[cand.k], to_jsonb(coalesce((taken ->> cand.k)::integer, 0) + 1));
                    picked_ids := picked_ids || cand.job_id;
                    drop_parts := drop_parts || cand.part;
                    drop_rows := drop_rows || cand.row_id;
                END IF;
            END IF;
        END LOOP;
        IF seen = 0 THEN
            -- No row of the head could be taken: were there any, all of keys
            -- without a free slot?
            SELECT count(*) INTO seen FROM (SELECT 1 FROM weir_ready r WHERE r.queue = q AND r.scheduled_at <= now()
                ORDER BY r.priority, r.scheduled_at, r.job_id LIMIT 4 * n + 500) h;
            capped := capped OR seen > 0;
        END IF;
        -- When keys without a free slot fill the head and there may be more,
        -- each other key's first due rows, as many as it has free slots,
        -- found by a skip scan of weir_ready_key_idx over the keys with rows
        -- in the list: a key's backlog does not hide another key's jobs.
        IF cardinality(picked_ids) < n AND seen = 4 * n + 500 THEN
            FOR cand IN
                WITH RECURSIVE keys(k) AS (
                    (SELECT r.key FROM weir_ready r WHERE r.queue = q AND r.key IS NOT NULL ORDER BY r.key LIMIT 1)
                    UNION ALL
                    SELECT (SELECT r.key FROM weir_ready r WHERE r.queue = q AND r.key > keys.k ORDER BY r.key LIMIT 1)
                    FROM keys WHERE keys.k IS NOT NULL
                ),
                free AS (
                    SELECT keys.k, least(key_lim - coalesce((busy_keys ->> keys.k)::integer, 0)
                        - coalesce((taken ->> keys.k)::integer, 0), n - cardinality(picked_ids)) AS slots
                    FROM keys WHERE keys.k IS NOT NULL
                )
                SELECT c.part, c.row_id, c.job_id, j.id AS available,
                    weir_job_key(key_src, key_path, j.args, j.metadata) AS k
                FROM (SELECT x.* FROM free, LATERAL (
                        SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id, r.priority, r.scheduled_at
                        FROM weir_ready r
                        WHERE r.queue = q AND r.key = free.k AND r.scheduled_at <= now()
                            AND r.job_id <> ALL(picked_ids)
                        -- r.key first, though one: only weir_ready_key_idx
                        -- gives this order without a sort, which the
                        -- settings cost as disabled, and statistics of one
                        -- key's backlog would otherwise have the planner
                        -- filter the claim index by key.
                        ORDER BY r.key, r.priority, r.scheduled_at, r.job_id
                        LIMIT greatest(free.slots, 0)) x
                    ) c
                LEFT JOIN weir_job j ON j.id = c.job_id
                    AND CASE WHEN j.state = 'available' AND j.queue = q AND j.scheduled_at <= now() THEN true ELSE false END
                ORDER BY c.priority, c.scheduled_at, c.job_id
            LOOP
                IF cand.available IS NULL OR cand.job_id = ANY(picked_ids) THEN
                    drop_parts := drop_parts || cand.part;
                    drop_rows := drop_rows || cand.row_id;
                ELSIF cardinality(picked_ids) < n THEN
                    used := coalesce((busy_keys ->> cand.k)::integer, 0) + coalesce((taken ->> cand.k)::integer, 0);
                    IF used >= key_lim THEN
                        capped := true; -- a stale hint's key, full
                    ELSE
                        taken := jsonb_set(taken, ARRAY[cand.k], to_jsonb(coalesce((taken ->> cand.k)::integer, 0) + 1));
                        picked_ids := picked_ids || cand.job_id;
                        drop_parts := drop_parts || cand.part;
                        drop_rows := drop_rows || cand.row_id;
                    END IF;
                END IF;
            END LOOP;
        END IF;
        DELETE FROM weir_ready r USING unnest(drop_parts, drop_rows) AS d(part, row_id)
        WHERE r.tableoid = d.part AND r.ctid = d.row_id;
        IF cardinality(picked_ids) > 0 THEN
            RETURN QUERY
            UPDATE weir_job j SET
                state = 'running',
                attempt = j.attempt + 1,
                lease_token = greatest(j.lease_token + 1, (extract(epoch FROM now()) * 1000000)::bigint),
                lease_expires_at = now() + lease_us * interval '1 microsecond',
                attempted_at = now(),
                attempted_by = client_id
            WHERE j.id = ANY(picked_ids)
                AND CASE WHEN j.state = 'available' AND j.queue = q AND j.scheduled_at <= now() THEN true ELSE false END
            RETURNING j.*;
            GET DIAGNOSTICS got = ROW_COUNT;
        END IF;
    ELSIF n > 0 THEN
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
        IF got > 0 THEN -- with none, tat is at most now(), as if never moved
            UPDATE weir_queue p SET rate_tat = tat WHERE p.name = q;
        END IF;
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
