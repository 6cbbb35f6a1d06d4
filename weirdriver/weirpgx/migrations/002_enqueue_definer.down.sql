-- weir_enqueue and the functions of weir_job's triggers as 001_baseline makes
-- them: weir_enqueue runs with its caller's rights and PUBLIC may execute it;
-- each search_path is weir's schema alone (the migrator's). Grants made to
-- other roles stay. The body stays the newest, which the binary holds.
ALTER FUNCTION weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb, boolean,
    boolean, interval, text[], integer, text[], text) SECURITY INVOKER SET search_path FROM CURRENT;
ALTER FUNCTION weir_ready_inserted() SET search_path FROM CURRENT;
ALTER FUNCTION weir_ready_updated() SET search_path FROM CURRENT;
GRANT EXECUTE ON FUNCTION weir_enqueue(text, jsonb, text, integer, timestamptz, integer, text[], jsonb, boolean,
    boolean, interval, text[], integer, text[], text) TO PUBLIC;
