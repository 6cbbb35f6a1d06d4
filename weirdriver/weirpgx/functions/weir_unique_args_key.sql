-- A unique key that includes the args: SHA-256 of the prefix, "\0args=" and the
-- args' jsonb text, which is the same for equal JSON values whatever their key
-- order or spacing.
CREATE OR REPLACE FUNCTION weir_unique_args_key(prefix bytea, args jsonb) RETURNS bytea
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN sha256(prefix || '\x00'::bytea || convert_to('args=' || args::text, 'UTF8'));
