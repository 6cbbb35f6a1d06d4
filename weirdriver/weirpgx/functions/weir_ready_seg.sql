-- The segment new rows go to: the second of the writing transaction's start,
-- modulo the segment count.
CREATE OR REPLACE FUNCTION weir_ready_seg() RETURNS smallint
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (floor(extract(epoch FROM now()))::bigint % 4)::smallint;
