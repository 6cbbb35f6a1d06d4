-- weir:compatible
-- The ready list on demand (docs/design/storage.md). weir_ready_mode's value
-- modulo 4 says what writers and claims do: 0 (off) the triggers write no
-- rows and claims walk the job table's index of available jobs; 1 (writing)
-- the triggers write rows and claims still walk the index; 2 (on) claims walk
-- the list. The maintenance leader alone changes it (weirpgx's readyMode),
-- each time to a higher value: on when claims walk the index's entries of
-- jobs an old snapshot keeps, or a queue has limits per key; off when its
-- probes find the walk short again. A sequence, because its value is read
-- without a snapshot: a transaction that began before the list was turned on
-- sees it on.
--
-- A schema that has jobs keeps its list on (the triggers wrote it whole); a
-- new one starts off. Any role may read the mode: the triggers run with the
-- rights of whoever writes weir_job, and the value tells nothing.
--
-- Compatible: a weir that does not know the mode claims through the same
-- function, and its leader, which never turns the list on, leaves claims on
-- the index (or on the list, if it was on).
CREATE SEQUENCE weir_ready_mode MINVALUE 0 NO CYCLE;
SELECT setval('weir_ready_mode', CASE WHEN EXISTS (SELECT 1 FROM weir_job)
    OR EXISTS (SELECT 1 FROM weir_queue WHERE key_source IS NOT NULL) THEN 2 ELSE 0 END, true);
GRANT SELECT ON SEQUENCE weir_ready_mode TO PUBLIC;
-- weir:install functions/weir_ready_inserted.sql
-- weir:install functions/weir_ready_updated.sql
-- weir:install functions/weir_ready_repair.sql
-- weir:install functions/weir_ready_claim.sql
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION weir_ready_inserted() SET search_path TO %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION weir_ready_updated() SET search_path TO %I, pg_temp', current_schema());
END
$$;
