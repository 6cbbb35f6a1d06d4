-- Times in the years 1..9999 UTC, and a weir_enqueue that refuses what the Go
-- client refuses: times out of that range (infinity included), metadata over
-- the size limit, and no limit at all (max_args_bytes => NULL).
--
-- The range is what RFC 3339, and so JSON, can write (the Go client sends times
-- as JSON, and JSON is how operators see them); a job scheduled at infinity made
-- every claim of its queue fail, since no client can read infinity as a time.
-- The constraints make every time a row can hold readable. NULL passes them, as
-- before.
--
-- Rows that already hold such times (from weir_enqueue before this migration,
-- or written by hand) are moved to the nearest end of the range in this same
-- transaction, which keeps their meaning: a job due at -infinity is due first,
-- one due at infinity stays scheduled (until 9999). Down keeps them so.
--
-- Only constraints are added and the function keeps its signature, so a weir
-- that knows only migrations 1-4 works on this schema as before.

UPDATE weir_job SET
    scheduled_at = CASE WHEN scheduled_at < '0001-01-01 00:00:00+00' THEN '0001-01-01 00:00:00+00'
        WHEN scheduled_at >= '10000-01-01 00:00:00+00' THEN '9999-12-31 23:59:59.999999+00' ELSE scheduled_at END,
    created_at = CASE WHEN created_at < '0001-01-01 00:00:00+00' THEN '0001-01-01 00:00:00+00'
        WHEN created_at >= '10000-01-01 00:00:00+00' THEN '9999-12-31 23:59:59.999999+00' ELSE created_at END,
    attempted_at = CASE WHEN attempted_at < '0001-01-01 00:00:00+00' THEN '0001-01-01 00:00:00+00'
        WHEN attempted_at >= '10000-01-01 00:00:00+00' THEN '9999-12-31 23:59:59.999999+00' ELSE attempted_at END,
    finalized_at = CASE WHEN finalized_at < '0001-01-01 00:00:00+00' THEN '0001-01-01 00:00:00+00'
        WHEN finalized_at >= '10000-01-01 00:00:00+00' THEN '9999-12-31 23:59:59.999999+00' ELSE finalized_at END,
    lease_expires_at = CASE WHEN lease_expires_at < '0001-01-01 00:00:00+00' THEN '0001-01-01 00:00:00+00'
        WHEN lease_expires_at >= '10000-01-01 00:00:00+00' THEN '9999-12-31 23:59:59.999999+00' ELSE lease_expires_at END,
    cancel_requested_at = CASE WHEN cancel_requested_at < '0001-01-01 00:00:00+00' THEN '0001-01-01 00:00:00+00'
        WHEN cancel_requested_at >= '10000-01-01 00:00:00+00' THEN '9999-12-31 23:59:59.999999+00' ELSE cancel_requested_at END
WHERE scheduled_at < '0001-01-01 00:00:00+00' OR scheduled_at >= '10000-01-01 00:00:00+00'
   OR created_at < '0001-01-01 00:00:00+00' OR created_at >= '10000-01-01 00:00:00+00'
   OR attempted_at < '0001-01-01 00:00:00+00' OR attempted_at >= '10000-01-01 00:00:00+00'
   OR finalized_at < '0001-01-01 00:00:00+00' OR finalized_at >= '10000-01-01 00:00:00+00'
   OR lease_expires_at < '0001-01-01 00:00:00+00' OR lease_expires_at >= '10000-01-01 00:00:00+00'
   OR cancel_requested_at < '0001-01-01 00:00:00+00' OR cancel_requested_at >= '10000-01-01 00:00:00+00';

ALTER TABLE weir_job
    ADD CONSTRAINT weir_job_scheduled_at_check CHECK (scheduled_at >= '0001-01-01 00:00:00+00' AND scheduled_at < '10000-01-01 00:00:00+00'),
    ADD CONSTRAINT weir_job_created_at_check CHECK (created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00'),
    ADD CONSTRAINT weir_job_attempted_at_check CHECK (attempted_at >= '0001-01-01 00:00:00+00' AND attempted_at < '10000-01-01 00:00:00+00'),
    ADD CONSTRAINT weir_job_finalized_at_check CHECK (finalized_at >= '0001-01-01 00:00:00+00' AND finalized_at < '10000-01-01 00:00:00+00'),
    ADD CONSTRAINT weir_job_lease_expires_at_check CHECK (lease_expires_at >= '0001-01-01 00:00:00+00' AND lease_expires_at < '10000-01-01 00:00:00+00'),
    ADD CONSTRAINT weir_job_cancel_requested_at_check CHECK (cancel_requested_at >= '0001-01-01 00:00:00+00' AND cancel_requested_at < '10000-01-01 00:00:00+00');

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
