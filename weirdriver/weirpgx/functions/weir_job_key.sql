-- A job's key under a key limit of the field path of its source.
CREATE OR REPLACE FUNCTION weir_job_key(source text, path text[], args jsonb, metadata jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN coalesce(CASE source WHEN 'args' THEN args #>> path ELSE metadata #>> path END, '');
