-- weir:compatible
-- weir_enqueue runs with its owner's rights, so that a role granted EXECUTE on
-- it and nothing on weir's tables can enqueue and do nothing else
-- (docs/sql-enqueue.md); SELECT and UPDATE on weir_job, which it would need
-- otherwise, let a caller read, change or cancel any job. Only roles granted
-- EXECUTE may call it (and its owner).
--
-- A function that runs with its owner's rights must not find a caller's
-- objects, so its search_path is weir's schema then pg_temp: listed last,
-- pg_temp is never searched before weir's tables (PostgreSQL searches it first
-- when the path leaves it out). The functions of weir_job's triggers run with
-- the same rights inside it, and get the same path.
--
-- Compatible: no weir client calls weir_enqueue, and the triggers do what they
-- did. A role that called weir_enqueue through PUBLIC's EXECUTE needs a grant.
-- weir_enqueue also refuses a max_args_bytes above its own limit (1 MiB).
-- weir:install functions/weir_enqueue.sql
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[],'
        ' jsonb, boolean, boolean, interval, text[], integer, text[], text)'
        ' SECURITY DEFINER SET search_path TO %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION weir_ready_inserted() SET search_path TO %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION weir_ready_updated() SET search_path TO %I, pg_temp', current_schema());
END
$$;
REVOKE ALL ON FUNCTION weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb, boolean,
    boolean, interval, text[], integer, text[], text) FROM PUBLIC;
