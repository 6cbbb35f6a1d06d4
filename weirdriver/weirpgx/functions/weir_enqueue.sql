-- weir_enqueue inserts a job from SQL, so that any language (or psql) can
-- enqueue inside its own transaction (docs/sql-enqueue.md). It validates as the
-- Go client does, with the same messages, derives unique keys as the Go client
-- does (by args or a subset of their top-level keys, by queue, by period), does
-- what UniqueOpts' conflict modes do to a pending job holding the key (skip,
-- replace or debounce), and notifies workers at commit. It returns the job's id,
-- whether it found a duplicate, and whether it replaced one. Its search_path is
-- pinned to weir's schema at creation.
--
-- Migration 002_enqueue_definer makes it run with its owner's rights (SECURITY
-- DEFINER), pins its search_path to weir's schema then pg_temp, and takes
-- EXECUTE from PUBLIC, so that a role granted EXECUTE on it and nothing on the
-- tables can enqueue and do nothing else (docs/sql-enqueue.md). They are not
-- written here because the baseline installs this file too, and a schema at
-- version 1 keeps what the baseline made: the caller's rights, EXECUTE for
-- PUBLIC. (The owner's rights with EXECUTE for PUBLIC and pg_temp searched
-- first would let any role run code of its own as the owner.) CREATE OR
-- REPLACE resets the rights and the path, so a migration that installs this
-- file again sets them again as 002 does (TestEnqueueDefiner checks them).
CREATE OR REPLACE FUNCTION weir_enqueue(
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
    max_args_bytes integer DEFAULT 1048576,
    unique_args_keys text[] DEFAULT NULL,
    unique_on_conflict text DEFAULT 'skip'
) RETURNS TABLE (id bigint, duplicate boolean, replaced boolean)
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    name_pattern CONSTANT text := '^[A-Za-z0-9][A-Za-z0-9_.:-]*$';
    -- The largest args (and metadata) the function takes, whoever calls it: the
    -- Go client's DefaultMaxArgsBytes and max_args_bytes' default. A caller's
    -- max_args_bytes may lower it, never raise it.
    server_max_args_bytes CONSTANT integer := 1048576;
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
    v_mode text := coalesce(nullif(unique_on_conflict, ''), 'skip');
    v_key_args jsonb := weir_enqueue.args;
    v_i integer;
    -- Whether the job is unique, as the Go client's UniqueOpts: all unset means not.
    v_unique CONSTANT boolean := coalesce(unique_by_args OR unique_by_queue OR unique_period IS NOT NULL
        OR unique_states IS NOT NULL OR coalesce(cardinality(unique_args_keys), 0) > 0, false);
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
    ELSIF max_args_bytes > server_max_args_bytes THEN
        RAISE EXCEPTION 'weir: invalid: max_args_bytes % is above the server''s limit of % bytes; it may only lower the limit',
            max_args_bytes, server_max_args_bytes USING ERRCODE = '22023';
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

    -- Unique options, as the Go client's UniqueOpts: all unset means not unique,
    -- and a conflict mode other than skip needs the job to be unique.
    IF v_mode NOT IN ('skip', 'replace', 'debounce') THEN
        RAISE EXCEPTION 'weir: invalid: unique conflict mode "%" is not one of skip, replace, debounce',
            left(v_mode, 40) || CASE WHEN length(v_mode) > 40 THEN '...' ELSE '' END USING ERRCODE = '22023';
    END IF;
    IF NOT v_unique AND v_mode <> 'skip' THEN
        RAISE EXCEPTION 'weir: invalid: unique conflict mode "%" is set but the job is not unique',
            v_mode USING ERRCODE = '22023';
    END IF;
    IF v_unique THEN
        -- The keys of a key by a subset of args: the same rules and words as the
        -- Go client's checkUniqueArgsKeys.
        IF cardinality(unique_args_keys) > 32 THEN
            RAISE EXCEPTION 'weir: invalid: % unique args keys given; the limit is 32',
                cardinality(unique_args_keys) USING ERRCODE = '22023';
        END IF;
        FOR v_i IN 1 .. coalesce(cardinality(unique_args_keys), 0) LOOP
            IF unique_args_keys[v_i] IS NULL OR unique_args_keys[v_i] = '' THEN
                RAISE EXCEPTION 'weir: invalid: unique args key is empty' USING ERRCODE = '22023';
            ELSIF octet_length(unique_args_keys[v_i]) > 128 THEN
                RAISE EXCEPTION 'weir: invalid: unique args key "%" is % bytes long; the limit is 128',
                    left(unique_args_keys[v_i], 40) || CASE WHEN length(unique_args_keys[v_i]) > 40 THEN '...' ELSE '' END,
                    octet_length(unique_args_keys[v_i]) USING ERRCODE = '22023';
            ELSIF unique_args_keys[v_i] = ANY (unique_args_keys[1:v_i - 1]) THEN
                RAISE EXCEPTION 'weir: invalid: unique args key "%" is listed twice',
                    unique_args_keys[v_i] USING ERRCODE = '22023';
            END IF;
        END LOOP;
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
        IF coalesce(cardinality(unique_args_keys), 0) > 0 THEN
            -- The object of the listed keys the args hold; jsonb's text of it is
            -- canonical, as of all args.
            SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}') INTO v_key_args
            FROM jsonb_each(weir_enqueue.args) AS e WHERE e.key = ANY (unique_args_keys);
        END IF;
        IF unique_by_args OR coalesce(cardinality(unique_args_keys), 0) > 0 THEN
            v_key := weir_unique_args_key(v_key, v_key_args);
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
        -- The holder is locked and read at its latest version: one that a claim
        -- took meanwhile is running and stays as it is.
        ON CONFLICT (unique_key)
            WHERE unique_key IS NOT NULL AND (unique_states & weir_state_bit(state)) <> 0
            DO UPDATE SET (kind, args, metadata, tags, priority, max_attempts, scheduled_at, state) = (
                SELECT j.kind,
                    CASE WHEN m.replace THEN EXCLUDED.args ELSE j.args END,
                    CASE WHEN m.replace THEN EXCLUDED.metadata ELSE j.metadata END,
                    CASE WHEN m.replace THEN EXCLUDED.tags ELSE j.tags END,
                    CASE WHEN m.replace THEN EXCLUDED.priority ELSE j.priority END,
                    CASE WHEN m.replace THEN EXCLUDED.max_attempts ELSE j.max_attempts END,
                    CASE WHEN m.debounce THEN EXCLUDED.scheduled_at ELSE j.scheduled_at END,
                    CASE WHEN NOT m.debounce THEN j.state
                        WHEN EXCLUDED.scheduled_at <= now() THEN 'available'
                        WHEN j.state = 'retryable' THEN 'retryable'
                        ELSE 'scheduled' END
                FROM (SELECT v_mode <> 'skip' AND j.state IN ('scheduled', 'available', 'retryable') AS replace,
                    v_mode = 'debounce' AND j.state IN ('scheduled', 'available', 'retryable') AS debounce) AS m)
        RETURNING j.id, j.xmax <> 0 AS duplicate, j.state, j.queue
    )
    SELECT i.id, i.duplicate,
        i.duplicate AND v_mode <> 'skip' AND i.state IN ('scheduled', 'available', 'retryable')
    FROM inserted AS i
    WHERE CASE WHEN (NOT i.duplicate OR v_mode <> 'skip') AND i.state = 'available'
        THEN pg_notify(current_schema() || '.weir_insert', i.queue) IS NOT NULL ELSE true END;
END
$$;
