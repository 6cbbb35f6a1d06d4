-- Reverts 008: restores weir_enqueue as 005 left it (13 parameters, id and
-- duplicate), keeping the grants made on it. Jobs that replace or debounce
-- changed stay as they are.

-- DROP FUNCTION loses the grants made on it by hand (after REVOKE ... FROM
-- PUBLIC, say): they are kept here and given to the new function.
CREATE TEMP TABLE weir_enqueue_acl AS
SELECT a.grantee, a.is_grantable
FROM pg_proc AS p, aclexplode(p.proacl) AS a
WHERE p.oid = 'weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb, boolean, boolean, interval, text[], integer, text[], text)'::regprocedure AND a.privilege_type = 'EXECUTE';

DROP FUNCTION weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb, boolean, boolean, interval, text[], integer, text[], text);

CREATE FUNCTION weir_enqueue(
    kind text,
    args jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 2,
    scheduled_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 25,
    tags text[] DEFAULT '{}',
    metadata jsonb DEFAULT '{}',
    unique_by_args boolean DEFAULT false,
    unique_by_queue boolean DEFAULT false,
    unique_period interval DEFAULT NULL,
    unique_states text[] DEFAULT NULL,
    max_args_bytes integer DEFAULT 1048576
) RETURNS TABLE (id bigint, duplicate boolean)
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    name_pattern CONSTANT text := '^[A-Za-z0-9][A-Za-z0-9_.:-]*$';
    all_states CONSTANT text[] := ARRAY['scheduled', 'available', 'running', 'retryable',
        'completed', 'cancelled', 'discarded'];
    v_states text[];
    v_state text;
    v_tag text;
    v_at timestamptz := coalesce(weir_enqueue.scheduled_at, now());
    v_period bigint;
    v_key bytea;
    v_mask smallint;
    v_job_state text;
BEGIN
    -- Names: the same rules and words as the Go client's validateName.
    IF weir_enqueue.kind IS NULL OR weir_enqueue.kind = '' THEN
        RAISE EXCEPTION 'weir: invalid: kind is empty' USING ERRCODE = '22023';
    ELSIF octet_length(weir_enqueue.kind) > 128 THEN
        RAISE EXCEPTION 'weir: invalid: kind "%" is % bytes long; the limit is 128',
            left(weir_enqueue.kind, 40), octet_length(weir_enqueue.kind) USING ERRCODE = '22023';
    ELSIF weir_enqueue.kind !~ name_pattern THEN
        RAISE EXCEPTION 'weir: invalid: kind "%" has characters outside [A-Za-z0-9_.:-] or does not start with a letter or digit',
            weir_enqueue.kind USING ERRCODE = '22023';
    END IF;
    IF weir_enqueue.queue IS NULL OR weir_enqueue.queue = '' THEN
        RAISE EXCEPTION 'weir: invalid: queue is empty' USING ERRCODE = '22023';
    ELSIF octet_length(weir_enqueue.queue) > 128 THEN
        RAISE EXCEPTION 'weir: invalid: queue "%" is % bytes long; the limit is 128',
            left(weir_enqueue.queue, 40), octet_length(weir_enqueue.queue) USING ERRCODE = '22023';
    ELSIF weir_enqueue.queue !~ name_pattern THEN
        RAISE EXCEPTION 'weir: invalid: queue "%" has characters outside [A-Za-z0-9_.:-] or does not start with a letter or digit',
            weir_enqueue.queue USING ERRCODE = '22023';
    END IF;

    IF weir_enqueue.args IS NULL OR jsonb_typeof(weir_enqueue.args) <> 'object' THEN
        RAISE EXCEPTION 'weir: invalid: args of kind "%" must be a JSON object, got %',
            weir_enqueue.kind, left(coalesce(weir_enqueue.args::text, 'NULL'), 40) USING ERRCODE = '22023';
    END IF;
    -- NULL would turn the limit off; the Go client's limit is never off.
    IF max_args_bytes IS NULL OR max_args_bytes < 1 THEN
        RAISE EXCEPTION 'weir: invalid: max_args_bytes % is not a positive number of bytes',
            coalesce(max_args_bytes::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF octet_length(weir_enqueue.args::text) > max_args_bytes THEN
        RAISE EXCEPTION 'weir: invalid: args of kind "%" are % bytes; the limit is %',
            weir_enqueue.kind, octet_length(weir_enqueue.args::text), max_args_bytes USING ERRCODE = '22023';
    END IF;
    IF weir_enqueue.priority IS NULL OR weir_enqueue.priority NOT BETWEEN 1 AND 4 THEN
        RAISE EXCEPTION 'weir: invalid: priority % is out of range 1..4', weir_enqueue.priority USING ERRCODE = '22023';
    END IF;
    IF weir_enqueue.max_attempts IS NULL OR weir_enqueue.max_attempts NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'weir: invalid: max attempts % is out of range 1..10000', weir_enqueue.max_attempts USING ERRCODE = '22023';
    END IF;
    IF cardinality(coalesce(weir_enqueue.tags, '{}')) > 32 THEN
        RAISE EXCEPTION 'weir: invalid: % tags given; the limit is 32', cardinality(weir_enqueue.tags) USING ERRCODE = '22023';
    END IF;
    FOREACH v_tag IN ARRAY coalesce(weir_enqueue.tags, '{}') LOOP
        IF v_tag IS NULL OR v_tag = '' THEN
            RAISE EXCEPTION 'weir: invalid: tag is empty' USING ERRCODE = '22023';
        ELSIF octet_length(v_tag) > 128 OR v_tag !~ name_pattern THEN
            RAISE EXCEPTION 'weir: invalid: tag "%" has characters outside [A-Za-z0-9_.:-], does not start with a letter or digit, or is over 128 bytes',
                left(v_tag, 40) USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF weir_enqueue.metadata IS NULL OR jsonb_typeof(weir_enqueue.metadata) <> 'object' THEN
        RAISE EXCEPTION 'weir: invalid: metadata must be a JSON object, got %',
            left(coalesce(weir_enqueue.metadata::text, 'NULL'), 40) USING ERRCODE = '22023';
    END IF;
    IF octet_length(weir_enqueue.metadata::text) > max_args_bytes THEN
        RAISE EXCEPTION 'weir: invalid: metadata is % bytes; the limit is %',
            octet_length(weir_enqueue.metadata::text), max_args_bytes USING ERRCODE = '22023';
    END IF;
    -- The range the table's CHECK constraints hold scheduled_at to, with the Go
    -- client's words: infinity and years past 9999 are refused here rather than
    -- by the constraint, so that the caller gets 22023.
    IF weir_enqueue.scheduled_at IS NOT NULL AND NOT (weir_enqueue.scheduled_at >= '0001-01-01 00:00:00+00'
            AND weir_enqueue.scheduled_at < '10000-01-01 00:00:00+00') THEN
        RAISE EXCEPTION 'weir: invalid: scheduled time % is out of range: it must fall in the years 1..9999 UTC',
            weir_enqueue.scheduled_at USING ERRCODE = '22023';
    END IF;

    -- Unique options, as the Go client's UniqueOpts: all unset means not unique.
    IF unique_by_args OR unique_by_queue OR unique_period IS NOT NULL OR unique_states IS NOT NULL THEN
        IF unique_period IS NOT NULL THEN
            IF unique_period < interval '0' THEN
                RAISE EXCEPTION 'weir: invalid: unique period % is negative', unique_period USING ERRCODE = '22023';
            ELSIF unique_period < interval '1 second' THEN
                RAISE EXCEPTION 'weir: invalid: unique period % is under one second', unique_period USING ERRCODE = '22023';
            END IF;
            v_period := floor(extract(epoch FROM unique_period))::bigint;
        END IF;
        v_states := coalesce(unique_states,
            ARRAY['scheduled', 'available', 'running', 'retryable', 'completed']);
        FOREACH v_state IN ARRAY v_states LOOP
            IF v_state IS NULL OR NOT v_state = ANY (all_states) THEN
                RAISE EXCEPTION 'weir: invalid: unique state "%" is not a job state', v_state USING ERRCODE = '22023';
            END IF;
        END LOOP;
        FOREACH v_state IN ARRAY ARRAY['scheduled', 'available', 'running', 'retryable'] LOOP
            IF NOT v_state = ANY (v_states) THEN
                RAISE EXCEPTION 'weir: invalid: unique states must include "%" (they must hold scheduled, available, running and retryable)',
                    v_state USING ERRCODE = '22023';
            END IF;
        END LOOP;
        v_key := weir_unique_prefix(weir_enqueue.kind, weir_enqueue.queue, v_at, unique_by_queue, coalesce(v_period, 0));
        IF unique_by_args THEN
            v_key := weir_unique_args_key(v_key, weir_enqueue.args);
        END IF;
        SELECT sum(DISTINCT weir_state_bit(s))::smallint INTO v_mask FROM unnest(v_states) AS s;
    END IF;

    v_job_state := CASE WHEN v_at > now() THEN 'scheduled' ELSE 'available' END;
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO weir_job AS j (state, queue, kind, args, priority, max_attempts, scheduled_at,
            tags, metadata, unique_key, unique_states)
        VALUES (v_job_state, weir_enqueue.queue, weir_enqueue.kind, weir_enqueue.args,
            weir_enqueue.priority, weir_enqueue.max_attempts, v_at, coalesce(weir_enqueue.tags, '{}'),
            weir_enqueue.metadata, v_key, v_mask)
        ON CONFLICT (unique_key)
            WHERE unique_key IS NOT NULL AND (unique_states & weir_state_bit(state)) <> 0
            DO UPDATE SET kind = EXCLUDED.kind
        RETURNING j.id, j.xmax <> 0 AS duplicate, j.state, j.queue
    )
    SELECT i.id, i.duplicate FROM inserted AS i
    WHERE CASE WHEN NOT i.duplicate AND i.state = 'available'
        THEN pg_notify(current_schema() || '.weir_insert', i.queue) IS NOT NULL ELSE true END;
END
$$;

-- An ACL left at its default (NULL) has no rows: the new function has the
-- default too.
DO $acl$
DECLARE
    fn CONSTANT regprocedure := 'weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb, boolean, boolean, interval, text[], integer)'::regprocedure;
    r record;
BEGIN
    IF EXISTS (SELECT FROM pg_temp.weir_enqueue_acl) THEN
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
        FOR r IN SELECT * FROM pg_temp.weir_enqueue_acl LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s%s', fn,
                CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r.grantee)) END,
                CASE WHEN r.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END IF;
END
$acl$;
DROP TABLE pg_temp.weir_enqueue_acl;
