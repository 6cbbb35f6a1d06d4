DROP FUNCTION weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb,
    boolean, boolean, interval, text[], integer);
DROP FUNCTION weir_unique_args_key(bytea, jsonb);
DROP FUNCTION weir_unique_prefix(text, text, timestamptz, boolean, bigint);
