-- Sets queue q's limits per key on the field path of source: lim running
-- (NULL: none) and rate per period_us started (NULL, NULL: none); both NULL
-- remove them. When the field changes, it rewrites the hints of the queue's
-- rows in the list, forgets its keys' rate limiters and drops the buckets held
-- (they were buckets of the old keys). The lock on the list waits for every
-- transaction that wrote rows to it, which may have read the old settings, and
-- holds off new writers until this one commits: every row is then written
-- either with the new key or before the rewrite. It is taken only when the
-- field changes, which a client's Start that declares the same limits again
-- does not do, and before the queue's row is locked, in the order a claim takes
-- them (a claim that moves the queue's rate limiter holds the list first).
CREATE OR REPLACE FUNCTION weir_queue_set_key(q text, lim integer, rate integer, period_us bigint, source text, path text[])
    RETURNS void
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
DECLARE
    keyed boolean := lim IS NOT NULL OR rate IS NOT NULL;
    old_source text;
    old_path text[];
    locked boolean := false;
BEGIN
    IF NOT keyed THEN
        source := NULL;
        path := NULL;
    END IF;
    SELECT p.key_source, p.key_path INTO old_source, old_path FROM weir_queue p WHERE p.name = q;
    IF source IS DISTINCT FROM old_source OR path IS DISTINCT FROM old_path THEN
        LOCK TABLE weir_ready IN SHARE ROW EXCLUSIVE MODE;
        locked := true;
    END IF;
    INSERT INTO weir_queue AS p (name) VALUES (q) ON CONFLICT (name) DO NOTHING;
    SELECT p.key_source, p.key_path INTO old_source, old_path FROM weir_queue p WHERE p.name = q FOR UPDATE;
    UPDATE weir_queue p SET key_limit = lim, key_rate = rate, key_rate_period_us = period_us,
        key_source = source, key_path = path, updated_at = now()
    WHERE p.name = q;
    IF source IS DISTINCT FROM old_source OR path IS DISTINCT FROM old_path THEN
        IF NOT locked THEN -- another call changed the field meanwhile
            LOCK TABLE weir_ready IN SHARE ROW EXCLUSIVE MODE;
        END IF;
        UPDATE weir_ready r SET key = CASE WHEN keyed THEN weir_job_key(source, path, j.args, j.metadata) END
        FROM weir_job j WHERE r.queue = q AND j.id = r.job_id;
        DELETE FROM weir_key_rate r WHERE r.queue = q;
        -- The buckets held were of the old keys.
        DELETE FROM weir_key_share s WHERE s.queue = q;
    END IF;
END
$$;
