-- The part of a unique key that the Go client computes: SHA-256 over "kind=K",
-- then "\0queue=Q" and "\0period=SECONDS@BUCKET" (the Unix time of the start of
-- the period the job is scheduled in) when chosen.
CREATE OR REPLACE FUNCTION weir_unique_prefix(
    kind text, queue text, at timestamptz, by_queue boolean, period_seconds bigint
) RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN sha256(convert_to('kind=' || kind, 'UTF8')
        || CASE WHEN by_queue THEN '\x00'::bytea || convert_to('queue=' || queue, 'UTF8') ELSE ''::bytea END
        || CASE WHEN period_seconds > 0 THEN '\x00'::bytea || convert_to('period=' || period_seconds || '@'
            || floor(extract(epoch FROM at) / period_seconds)::bigint * period_seconds, 'UTF8')
            ELSE ''::bytea END);
