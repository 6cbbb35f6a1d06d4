-- weir_ready_claim leases up to n due jobs of queue q to client_id for
-- lease_us microseconds, read from the ready list while it is on, else from
-- the job table's index of available jobs (docs/design/storage.md), and
-- kept within the queue's limits (docs/flow-control.md, docs/design/flow-control.md). It returns the jobs
-- it leased, then, when there is something the client should know, one more
-- row with no id (the marker): its kind says whether a limit cut the claim
-- short ('capped'), whether the global limit did so for a client without a
-- share ('share': it may ask for one), whether the client claimed as the
-- holder of buckets of keys ('owned': it keeps each job within its key's
-- limit) or could ask for buckets ('keys'); its scheduled_at, the next start
-- a rate limit admits.
--
-- - A queue without limits, or whose only limit is its global one claimed by
--   a client holding a share of it (weir_queue_share), is claimed without a
--   lock and without counting.
-- - A queue limited per key, claimed by the holder of some of its keys'
--   buckets (buckets: those the client asks to claim as holder; those it
--   holds are used), is claimed from those buckets without the lock: no
--   other client claims their jobs. skip: the keys of which the client
--   already holds as many jobs as it may. The update that takes a job checks
--   the job's own key against its row's hint; a skip scan over the keys also
--   runs when a full bucket head is at least half of keys passed over, and at
--   random in one claim of 100, so that a key hidden behind others' backlogs
--   is found.
-- - Any other claim takes turns with the queue's others under an advisory
--   lock, counts the running jobs (of the queue, and of each key) on a
--   snapshot taken after the lock, reads the rate limiters, and takes a job
--   only while its limits admit one; it passes over the jobs of held buckets.
--
-- legacy: the marker as the four-argument form below gives it (only when a
-- limit cut the claim, its kind 'share' or empty). Keys are grouped and
-- counted bytewise (COLLATE "C").
CREATE OR REPLACE FUNCTION weir_ready_claim(q text, n integer, lease_us bigint, client_id text,
    buckets integer[], skip text[], legacy boolean)
    RETURNS SETOF weir_job
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET enable_sort = off
    SET enable_bitmapscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off
    SET enable_seqscan = off
    SET jit = off
    -- Planned once per connection: planning this function's statements
    -- anew for each call cost more than running them.
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    paused boolean;
    -- The queue's global limit and its rate limit.
    lim integer;
    rate integer;
    period_us bigint;
    tat timestamptz;
    t_us double precision;
    burst integer;
    k integer;
    busy bigint;
    -- Its limits per key: the key's field, at most key_lim running and
    -- key_rate started per key_period_us (one every key_t_us, key_burst at
    -- once) per key.
    key_src text;
    key_path text[];
    key_lim integer;
    key_rate integer;
    key_period_us bigint;
    key_t_us double precision;
    key_burst integer;
    -- By key: the running jobs (busy_keys); the limiter's time, in µs since
    -- 1970, of the keys whose time is ahead of now (tats); the keys this
    -- claim takes jobs of (taken_keys), with, at the same place, how many
    -- (taken_n) and the limiter's time they leave (taken_tat). Arrays, not
    -- jsonb: setting a key in a jsonb copies it whole, which made a claim of
    -- 500 keys spend some 20 ms on it alone.
    busy_keys jsonb := '{}';
    tats jsonb := '{}';
    taken_keys text[] := '{}';
    taken_n integer[] := '{}';
    taken_tat double precision[] := '{}';
    ti integer;
    now_us double precision := extract(epoch FROM now()) * 1000000;
    key_tat double precision;
    cand record;
    picked_ids bigint[] := '{}';
    picked_keys text[] := '{}';
    drop_parts oid[] := '{}';
    drop_rows tid[] := '{}';
    got bigint := 0;
    capped boolean := false;
    rate_capped boolean := false; -- by the queue's rate limit
    key_due timestamptz; -- the next start a key's rate limit admits
    scan_after text; -- where the last skip scan over the keys stopped
    scan_last text; -- the last key this claim's scan visited
    scan_keys integer; -- how many it visited
    scanned boolean; -- whether it scanned the keys at all
    marker weir_job;
    -- Whether the claiming client holds a live share of the global limit
    -- (weir_queue_share): then the limit is not counted here, the client
    -- keeping its handlers within its share; and whether the limit, counted,
    -- cut the claim short.
    has_share boolean := false;
    share_capped boolean := false;
    -- Shares of the keys (weir_key_share): whether the queue's limits let
    -- its keys be held (a limit per key, no rate limit), the buckets of keys
    -- that this client holds (mine: it claims as their holder), and the
    -- buckets any client holds (held: a counted claim passes them over).
    key_shares boolean := false;
    owner boolean := false;
    mine integer[] := '{}';
    held integer[] := '{}';
    per_bucket integer; -- rows read from the head of each of mine
    -- Whether claims walk the ready list (its mode, weir_ready_mode's value
    -- modulo 4, is 2) or the job table's index of available jobs (any other
    -- mode: the list is off, or being turned on). See weir_ready_inserted.
    listed boolean;
BEGIN
    -- The write lock on weir_job first, then the mode, as a writer reads it:
    -- a leader that turns the list on waits for the transactions holding the
    -- lock, so a claim that read the mode before the list was last turned
    -- off, and deletes rows by what it saw then, has ended before the
    -- leader adds the missing rows (model/ready.pml, CLAIM_READ_FIRST).
    LOCK TABLE weir_job IN ROW EXCLUSIVE MODE;
    listed := coalesce(pg_sequence_last_value(to_regclass('weir_ready_mode')) % 4, 2) = 2;
    -- The queue's settings, read once: a paused queue gives nothing.
    SELECT p.global_limit, p.rate_limit, p.key_source, p.key_path, p.key_limit, p.key_rate, p.paused_at IS NOT NULL
    INTO lim, rate, key_src, key_path, key_lim, key_rate, paused
    FROM weir_queue p WHERE p.name = q;
    skip := coalesce(skip, '{}');
    key_shares := key_lim IS NOT NULL AND key_rate IS NULL AND rate IS NULL;
    IF key_shares AND cardinality(buckets) > 0 THEN
        mine := ARRAY(SELECT s.bucket FROM weir_key_share s WHERE s.queue = q
            AND s.holder = weir_ready_claim.client_id AND s.expires_at >= now() AND s.bucket = ANY(buckets));
        owner := cardinality(mine) > 0;
    END IF;
    has_share := lim IS NOT NULL AND EXISTS (SELECT 1 FROM weir_queue_share s
        WHERE s.queue = q AND s.holder = weir_ready_claim.client_id AND s.expires_at >= now());
    -- A queue whose only limit is its global one, claimed by a client that
    -- holds a share of it, is claimed as a queue without limits.
    -- A queue limited per key, claimed by the holder of some of its keys'
    -- buckets, is claimed from those buckets without the lock: no other
    -- client claims their jobs.
    IF (lim IS NOT NULL AND NOT has_share) OR rate IS NOT NULL OR (key_src IS NOT NULL AND NOT owner) THEN
        -- The queue's claims take turns under a transaction-level advisory
        -- lock named after the schema and the queue, held until the claim
        -- commits. Unlike a lock on the queue's row, it writes nothing: a
        -- claim that finds no free slot stays read-only and commits without
        -- a WAL flush. Read the settings again under it: they may have
        -- changed meanwhile.
        PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || q, 0));
        SELECT p.global_limit, p.rate_limit, p.rate_period_us, p.rate_tat, p.key_source, p.key_path, p.key_limit,
            p.key_rate, p.key_rate_period_us, p.paused_at IS NOT NULL
        INTO lim, rate, period_us, tat, key_src, key_path, key_lim, key_rate, key_period_us, paused
        FROM weir_queue p WHERE p.name = q;
        has_share := lim IS NOT NULL AND EXISTS (SELECT 1 FROM weir_queue_share s
            WHERE s.queue = q AND s.holder = weir_ready_claim.client_id AND s.expires_at >= now());
        key_shares := key_lim IS NOT NULL AND key_rate IS NULL AND rate IS NULL;
        owner := owner AND key_shares;
    END IF;
    IF paused THEN
        RETURN;
    END IF;
    IF key_src IS NOT NULL AND NOT listed THEN
        -- A queue limited per key is claimed through the list's key hints,
        -- and the list is on while any queue has such limits; a claim that
        -- finds it off (being turned on) takes nothing and has the client
        -- come back in 100 ms.
        marker.attempted_at := now();
        marker.kind := CASE WHEN NOT legacy THEN 'capped' END;
        marker.scheduled_at := now() + interval '100 milliseconds';
        RETURN NEXT marker;
        RETURN;
    END IF;
    IF lim IS NOT NULL AND NOT has_share THEN
        -- Counted on a snapshot taken after the lock: the live shares, and
        -- the running jobs of the clients that hold none (this one's too).
        -- Shares change only under the same lock (QueueShare).
        SELECT coalesce(sum(s.slots), 0) INTO busy FROM weir_queue_share s WHERE s.queue = q AND s.expires_at >= now();
        busy := busy + (SELECT count(*) FROM weir_job j WHERE j.queue = q AND j.state = 'running'
            AND NOT EXISTS (SELECT 1 FROM weir_queue_share s
                WHERE s.queue = q AND s.holder = j.attempted_by AND s.expires_at >= now()));
        IF lim - busy < n THEN
            capped := true;
            share_capped := true;
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
    IF n > 0 AND owner THEN
        -- A claim as the holder of the buckets mine. No other client claims
        -- their jobs or runs them (a bucket is taken only while none of its
        -- jobs runs: weirpgx's KeyShare), so nothing is counted here: the
        -- client runs at most key_lim of a key at once. It names in skip the
        -- keys of which it holds key_lim + 3 jobs waiting or more, which the
        -- claim passes over, and it takes at most key_lim + 3 of any key
        -- (weirdriver.KeyDepth), so that no key fills the client's buffer,
        -- and each key's next jobs wait there for its slot.
        --
        -- First the rows to take, by their key hints alone: the head of
        -- each bucket of mine, in claim order (weir_ready_bucket_idx), the
        -- rows without a hint among the first 16 of the queue, and, when a
        -- bucket's head was full and held no more than two keys, or was at
        -- least half of keys passed over (their backlogs may hide other
        -- keys), or else in one claim of 100 at random, each key's first
        -- rows, found by the skip scan of the counted claim below, from
        -- where the last scan stopped. Keys are compared bytewise (COLLATE
        -- "C"): only equality matters here.
        per_bucket := ceil(n::numeric / cardinality(mine))::integer + 2;
        SELECT s.after INTO scan_after FROM weir_key_scan s WHERE s.queue = q;
        WITH RECURSIVE head AS MATERIALIZED (
            SELECT m.b, x.part, x.row_id, x.job_id, x.priority, x.scheduled_at, x.key
            FROM unnest(mine) AS m(b), LATERAL (
                SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id, r.priority, r.scheduled_at, r.key
                FROM weir_ready r
                WHERE r.queue = q AND r.key IS NOT NULL AND weir_key_bucket(r.key) = m.b
                    AND r.scheduled_at <= now()
                ORDER BY weir_key_bucket(r.key), r.priority, r.scheduled_at, r.job_id
                LIMIT per_bucket) x
            UNION ALL
            SELECT NULL, h.part, h.row_id, h.job_id, h.priority, h.scheduled_at, h.key FROM (
                SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id, r.priority, r.scheduled_at, r.key
                FROM weir_ready r WHERE r.queue = q AND r.scheduled_at <= now()
                ORDER BY r.priority, r.scheduled_at, r.job_id LIMIT 16) h
            WHERE h.key IS NULL
        ),
        head_says AS (
            SELECT EXISTS (SELECT 1 FROM head f WHERE f.b IS NOT NULL GROUP BY f.b
                HAVING count(*) >= per_bucket AND (count(DISTINCT f.key COLLATE "C") <= 2
                    OR count(*) FILTER (WHERE f.key = ANY(skip)) * 2 >= count(*))) OR random() < 0.01 AS scan
        ),
        keys(k, i) AS (
            -- The first key: after scan_after, or the least. Two statements,
            -- each of which one filter on the variables alone turns off, so
            -- that the index finds the first key at once: "scan_after IS NULL
            -- OR r.key > scan_after" cannot bound the index scan, which then
            -- walked every key before it.
            (SELECT r.key, 1 FROM weir_ready r WHERE r.queue = q AND r.key IS NOT NULL AND scan_after IS NULL
                AND (SELECT head_says.scan FROM head_says)
            ORDER BY r.key LIMIT 1)
            UNION ALL
            (SELECT r.key, 1 FROM weir_ready r WHERE r.queue = q AND r.key > scan_after
                AND (SELECT head_says.scan FROM head_says)
            ORDER BY r.key LIMIT 1)
            UNION ALL
            SELECT (SELECT r.key FROM weir_ready r WHERE r.queue = q AND r.key > keys.k ORDER BY r.key LIMIT 1),
                keys.i + 1
            FROM keys WHERE keys.k IS NOT NULL AND keys.i < 256
        ),
        more AS (
            SELECT x.* FROM keys, LATERAL (
                SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id, r.priority, r.scheduled_at, r.key
                FROM weir_ready r
                WHERE r.queue = q AND r.key = keys.k AND r.scheduled_at <= now()
                ORDER BY r.key, r.priority, r.scheduled_at, r.job_id
                LIMIT key_lim + 3) x
            WHERE keys.k IS NOT NULL AND weir_key_bucket(keys.k) = ANY(mine) AND NOT keys.k = ANY(skip)
        ),
        -- The next scan goes on after the last key this one visited, or from
        -- the first when this one reached the last.
        scan_on AS (
            INSERT INTO weir_key_scan AS s (queue, after)
            SELECT q, max(keys.k) FROM keys HAVING count(keys.k) >= 256
            ON CONFLICT (queue) DO UPDATE SET after = excluded.after
        ),
        scan_over AS (
            DELETE FROM weir_key_scan s WHERE s.queue = q AND scan_after IS NOT NULL
                AND (SELECT head_says.scan FROM head_says) AND (SELECT count(keys.k) FROM keys) < 256
        ),
        -- The candidates by their hints (a row without one is its own
        -- key), at most key_lim + 3 of a key; the first n.
        c AS (
            SELECT cc.part, cc.row_id, cc.job_id, cc.key FROM (
                SELECT u.*, row_number() OVER (PARTITION BY coalesce(u.key, u.job_id::text) COLLATE "C"
                    ORDER BY u.priority, u.scheduled_at, u.job_id) AS nth
                FROM (
                    SELECT head.part, head.row_id, head.job_id, head.priority, head.scheduled_at, head.key FROM head
                    WHERE head.key IS NULL OR NOT head.key = ANY(skip)
                    UNION ALL
                    SELECT more.part, more.row_id, more.job_id, more.priority, more.scheduled_at, more.key FROM more
                    WHERE more.job_id NOT IN (SELECT head.job_id FROM head)
                ) u
            ) cc
            WHERE cc.nth <= key_lim + 3
            ORDER BY cc.priority, cc.scheduled_at, cc.job_id
            LIMIT n
        )
        SELECT coalesce(array_agg(c.part), '{}'), coalesce(array_agg(c.row_id), '{}'), coalesce(array_agg(c.job_id), '{}'),
            coalesce(array_agg(c.key), '{}')
        INTO drop_parts, drop_rows, picked_ids, picked_keys
        FROM c;
        -- Then their rows are dropped and their jobs taken, each if it is
        -- available and its own key (the truth) is its row's hint, which
        -- was chosen in a bucket of mine and not passed over; a row without
        -- a hint, if its job's key is in a bucket of mine and not passed
        -- over. The job is read once, by the update that takes it, which
        -- checks its key again on the newest version of its row when another
        -- transaction changed the row meanwhile.
        IF cardinality(picked_ids) > 0 THEN
            RETURN QUERY
            WITH dropped AS (
                DELETE FROM weir_ready r USING unnest(drop_parts, drop_rows) AS d(part, row_id)
                WHERE r.tableoid = d.part AND r.ctid = d.row_id
            )
            UPDATE weir_job j SET
                state = 'running',
                attempt = j.attempt + 1,
                lease_token = greatest(j.lease_token + 1, (extract(epoch FROM now()) * 1000000)::bigint),
                lease_expires_at = now() + lease_us * interval '1 microsecond',
                attempted_at = now(),
                attempted_by = client_id
            FROM unnest(picked_ids, picked_keys) AS p(id, hint)
            WHERE j.id = p.id
                AND CASE WHEN j.state = 'available' AND j.queue = q AND j.scheduled_at <= now()
                    AND CASE WHEN p.hint IS NOT NULL THEN weir_job_key(key_src, key_path, j.args, j.metadata) = p.hint
                        ELSE weir_key_bucket(weir_job_key(key_src, key_path, j.args, j.metadata)) = ANY(mine)
                            AND NOT weir_job_key(key_src, key_path, j.args, j.metadata) = ANY(skip) END
                THEN true ELSE false END
            RETURNING j.*;
            GET DIAGNOSTICS got = ROW_COUNT;
        END IF;
        IF got < cardinality(picked_ids) THEN
            -- A row whose job was not taken: a stale one (the job is no
            -- longer available), or one whose hint was not the job's key
            -- (its metadata changed), or whose job changed meanwhile. A job
            -- still available gets its row back, under its own key.
            INSERT INTO weir_ready (seg, queue, priority, scheduled_at, job_id, key)
            SELECT weir_ready_seg(), j.queue, j.priority, j.scheduled_at, j.id,
                weir_job_key(key_src, key_path, j.args, j.metadata)
            FROM weir_job j
            WHERE j.id = ANY(picked_ids) AND CASE WHEN j.state = 'available' AND j.queue = q THEN true ELSE false END;
        END IF;
    ELSIF n > 0 AND key_src IS NOT NULL THEN
        -- Counted, like the global limit's, on a snapshot taken after the
        -- lock: each key's running jobs, and the limiter's time of each key
        -- whose time is ahead of now (a key without one may start its burst).
        IF key_lim IS NOT NULL THEN
            SELECT coalesce(jsonb_object_agg(b.k, b.c), '{}') INTO busy_keys FROM (
                SELECT weir_job_key(key_src, key_path, j.args, j.metadata) AS k, count(*) AS c
                FROM weir_job j WHERE j.queue = q AND j.state = 'running' GROUP BY 1) b;
        END IF;
        -- The buckets of keys that a client holds: their jobs are its alone.
        held := ARRAY(SELECT s.bucket FROM weir_key_share s WHERE s.queue = q AND s.expires_at >= now());
        SELECT s.after INTO scan_after FROM weir_key_scan s WHERE s.queue = q;
        IF key_rate IS NOT NULL THEN
            key_t_us := key_period_us::double precision / key_rate;
            key_burst := 2 + floor(key_rate * 10000.0 / key_period_us)::integer;
            SELECT coalesce(jsonb_object_agg(r.key, extract(epoch FROM r.tat) * 1000000), '{}') INTO tats
            FROM weir_key_rate r WHERE r.queue = q AND r.tat > now();
        END IF;
        -- The candidates, in claim order. First the head of the queue, its
        -- first 2n + 100 due rows, less those whose key hint names a key
        -- without a free slot or ahead of its rate (read from the list
        -- alone). When those do not give n jobs and there may be more, also
        -- each other key's first due rows, as many as it has room for, found
        -- by a skip scan of weir_ready_key_idx over up to 256 keys with rows
        -- in the list, from where the last scan stopped (weir_key_scan), so
        -- that a key's backlog does not hide another key's jobs for more than
        -- a few claims, and a claim visits a bounded number of keys. Each
        -- candidate is then taken while its job's key (the truth, not the
        -- hint) has room.
        FOR cand IN
            WITH RECURSIVE head AS MATERIALIZED (
                SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id, r.priority, r.scheduled_at,
                    r.key IS NOT NULL AND (
                        (cardinality(held) > 0 AND weir_key_bucket(r.key) = ANY(held))
                        OR (key_lim IS NOT NULL AND coalesce((busy_keys ->> r.key)::integer, 0) >= key_lim)
                        OR (key_rate IS NOT NULL
                            AND coalesce((tats ->> r.key)::double precision, 0) - now_us > (key_burst - 1) * key_t_us)
                    ) AS full_hint,
                    CASE WHEN key_rate IS NOT NULL AND r.key IS NOT NULL
                        AND (tats ->> r.key)::double precision - now_us > (key_burst - 1) * key_t_us
                    THEN (tats ->> r.key)::double precision - (key_burst - 1) * key_t_us END AS due_us
                FROM weir_ready r WHERE r.queue = q AND r.scheduled_at <= now()
                ORDER BY r.priority, r.scheduled_at, r.job_id LIMIT 2 * n + 100
            ),
            -- What the head says: whether it was full and gave fewer than n
            -- rows to take (then the keys are scanned), whether it passed
            -- over any, and the first time a key's rate that held one back
            -- admits a start.
            head_says AS (
                SELECT count(*) = 2 * n + 100 AND count(*) FILTER (WHERE NOT head.full_hint) < n AS scan,
                    coalesce(bool_or(head.full_hint), false) AS passed, min(head.due_us) AS due_us
                FROM head
            ),
            keys(k, i) AS (
                -- The first key: after scan_after, or the least. Two statements,
                -- each of which one filter on the variables alone turns off, so
                -- that the index finds the first key at once: "scan_after IS NULL
                -- OR r.key > scan_after" cannot bound the index scan, which then
                -- walked every key before it.
                (SELECT r.key, 1 FROM weir_ready r WHERE r.queue = q AND r.key IS NOT NULL AND scan_after IS NULL
                    AND (SELECT head_says.scan FROM head_says)
                ORDER BY r.key LIMIT 1)
                UNION ALL
                (SELECT r.key, 1 FROM weir_ready r WHERE r.queue = q AND r.key > scan_after
                    AND (SELECT head_says.scan FROM head_says)
                ORDER BY r.key LIMIT 1)
                UNION ALL
                SELECT (SELECT r.key FROM weir_ready r WHERE r.queue = q AND r.key > keys.k ORDER BY r.key LIMIT 1),
                    keys.i + 1
                FROM keys WHERE keys.k IS NOT NULL AND keys.i < 256
            ),
            room AS (
                SELECT keys.k, CASE WHEN cardinality(held) > 0 AND weir_key_bucket(keys.k) = ANY(held) THEN 0
                ELSE least(n,
                    coalesce(key_lim, 2147483647) - coalesce((busy_keys ->> keys.k)::integer, 0),
                    CASE WHEN key_rate IS NULL THEN 2147483647 ELSE key_burst - greatest(
                        ceil((coalesce((tats ->> keys.k)::double precision, 0) - now_us) / key_t_us), 0)::integer END
                ) END AS slots
                FROM keys WHERE keys.k IS NOT NULL
            ),
            more AS (
                SELECT x.* FROM room, LATERAL (
                    SELECT r.tableoid AS part, r.ctid AS row_id, r.job_id, r.priority, r.scheduled_at
                    FROM weir_ready r
                    WHERE r.queue = q AND r.key = room.k AND r.scheduled_at <= now()
                    -- r.key first, though one: only weir_ready_key_idx gives
                    -- this order without a sort, which the settings cost as
                    -- disabled, and statistics of one key's backlog would
                    -- otherwise have the planner filter the claim index.
                    ORDER BY r.key, r.priority, r.scheduled_at, r.job_id
                    LIMIT greatest(room.slots, 0)) x
            ),
            c AS (
                SELECT head.part, head.row_id, head.job_id, head.priority, head.scheduled_at FROM head
                WHERE NOT head.full_hint
                UNION ALL
                SELECT more.part, more.row_id, more.job_id, more.priority, more.scheduled_at FROM more
                WHERE more.job_id NOT IN (SELECT head.job_id FROM head)
            )
            SELECT c.part, c.row_id, c.job_id, c.priority, c.scheduled_at, j.id AS available,
                weir_job_key(key_src, key_path, j.args, j.metadata) AS k, false AS passed, NULL::double precision AS due_us,
                NULL AS scan_last, NULL::bigint AS scan_keys, NULL::boolean AS scanned
            FROM c LEFT JOIN weir_job j ON j.id = c.job_id
                AND CASE WHEN j.state = 'available' AND j.queue = q AND j.scheduled_at <= now() THEN true ELSE false END
            UNION ALL -- first: what the head says, and where the scan stopped
            SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, head_says.passed, head_says.due_us,
                (SELECT max(keys.k) FROM keys), (SELECT count(keys.k) FROM keys), head_says.scan
            FROM head_says
            ORDER BY 4 NULLS FIRST, 5, 3
        LOOP
            capped := capped OR coalesce(cand.passed, false);
            IF cand.part IS NULL THEN
                key_due := to_timestamp(cand.due_us / 1000000);
                scan_last := cand.scan_last;
                scan_keys := cand.scan_keys;
                scanned := cand.scanned;
                CONTINUE;
            END IF;
            IF cand.available IS NULL OR cand.job_id = ANY(picked_ids) THEN
                drop_parts := drop_parts || cand.part; -- a stale hint, or a second
                drop_rows := drop_rows || cand.row_id;
                CONTINUE;
            END IF;
            IF cardinality(picked_ids) >= n THEN
                CONTINUE;
            END IF;
            IF cardinality(held) > 0 AND weir_key_bucket(cand.k) = ANY(held) THEN
                capped := true; -- a job of a key another client holds
                CONTINUE;
            END IF;
            ti := array_position(taken_keys, cand.k);
            IF key_lim IS NOT NULL AND coalesce((busy_keys ->> cand.k)::integer, 0)
                    + coalesce(taken_n[ti], 0) >= key_lim THEN
                capped := true;
                CONTINUE;
            END IF;
            IF key_rate IS NOT NULL THEN
                key_tat := greatest(coalesce(taken_tat[ti], (tats ->> cand.k)::double precision, now_us), now_us);
                IF key_tat - now_us > (key_burst - 1) * key_t_us THEN
                    capped := true;
                    key_due := least(key_due, to_timestamp((key_tat - (key_burst - 1) * key_t_us) / 1000000));
                    CONTINUE;
                END IF;
                key_tat := key_tat + key_t_us;
            END IF;
            IF ti IS NULL THEN
                taken_keys := taken_keys || cand.k;
                taken_n := taken_n || 1;
                taken_tat := taken_tat || key_tat; -- NULL without a rate per key
            ELSE
                taken_n[ti] := taken_n[ti] + 1;
                taken_tat[ti] := key_tat;
            END IF;
            picked_ids := picked_ids || cand.job_id;
            drop_parts := drop_parts || cand.part;
            drop_rows := drop_rows || cand.row_id;
        END LOOP;
        IF scanned AND scan_keys >= 256 THEN -- the next scan goes on from here
            INSERT INTO weir_key_scan AS s (queue, after) VALUES (q, scan_last)
            ON CONFLICT (queue) DO UPDATE SET after = excluded.after;
        ELSIF scanned AND scan_after IS NOT NULL THEN -- it reached the last key: the next from the first
            DELETE FROM weir_key_scan s WHERE s.queue = q;
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
        IF key_rate IS NOT NULL AND got > 0 THEN
            -- The limiter's time of the keys this claim took; now and then,
            -- forget the times that are past, which admit a burst as no time
            -- does.
            INSERT INTO weir_key_rate AS r (queue, key, tat)
            SELECT q, t.key, to_timestamp(t.tat / 1000000)
            FROM unnest(taken_keys, taken_tat) AS t(key, tat)
            ON CONFLICT (queue, key) DO UPDATE SET tat = excluded.tat;
            IF random() < 0.01 THEN
                DELETE FROM weir_key_rate r WHERE r.queue = q AND r.tat < now();
            END IF;
        END IF;
    ELSIF n > 0 AND NOT listed THEN
        -- The list is off: the job table's index of available jobs, in claim
        -- order, the rows nobody else holds.
        RETURN QUERY
        WITH picked AS (
            SELECT j.id FROM weir_job j
            WHERE j.state = 'available' AND j.queue = q AND j.scheduled_at <= now()
            ORDER BY j.priority, j.scheduled_at, j.id
            LIMIT n
            FOR UPDATE SKIP LOCKED
        )
        UPDATE weir_job j SET
            state = 'running',
            attempt = j.attempt + 1,
            lease_token = greatest(j.lease_token + 1, (extract(epoch FROM now()) * 1000000)::bigint),
            lease_expires_at = now() + lease_us * interval '1 microsecond',
            attempted_at = now(),
            attempted_by = client_id
        WHERE j.id = ANY(ARRAY(SELECT picked.id FROM picked))
        RETURNING j.*;
        GET DIAGNOSTICS got = ROW_COUNT;
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
    -- The row after the jobs: whether a limit cut the claim short, and what
    -- the client should know. The callers of the four-argument form
    -- (legacy) get it only when a limit cut the claim, its kind 'share' when
    -- the global limit did so for a client without a share. Others get it also after a claim as a key holder
    -- (owned: the client keeps each job within its key's limit) and from a
    -- queue whose keys may be held, by a client that holds none (keys: it
    -- may ask to), its kind the words that apply.
    IF capped OR (NOT legacy AND key_shares) THEN
        -- When the queue's rate cut the claim short, its next start is the
        -- next of any key; otherwise that of the first key waiting for its
        -- rate, if any.
        marker.attempted_at := now();
        IF legacy THEN
            IF share_capped THEN
                marker.kind := 'share'; -- the client may ask for a share
            END IF;
        ELSE
            marker.kind := concat_ws(' ', CASE WHEN capped THEN 'capped' END, CASE WHEN share_capped THEN 'share' END,
                CASE WHEN owner THEN 'owned' END, CASE WHEN key_shares AND NOT owner THEN 'keys' END);
        END IF;
        marker.scheduled_at := CASE WHEN rate_capped THEN tat - (burst - 1) * t_us * interval '1 microsecond'
            ELSE key_due END;
        RETURN NEXT marker;
    END IF;
END
$$;

-- The four-argument form: a claim without buckets or skips, whose marker
-- says only whether a limit cut it.
CREATE OR REPLACE FUNCTION weir_ready_claim(q text, n integer, lease_us bigint, client_id text)
    RETURNS SETOF weir_job
    LANGUAGE sql
    SET search_path FROM CURRENT
AS $$
    SELECT * FROM weir_ready_claim(q, n, lease_us, client_id, NULL, NULL, true)
$$;
