-- The bucket of a key: 0 to 63. weir computes it in Go too (keyBucket), from
-- the key the claim returns with each job.
CREATE OR REPLACE FUNCTION weir_key_bucket(k text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN get_byte(decode(md5(k), 'hex'), 0) & 63;
