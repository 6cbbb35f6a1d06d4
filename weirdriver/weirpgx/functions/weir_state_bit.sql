-- The bit of a state in unique_states; the order is weirdriver.StateBit's.
CREATE OR REPLACE FUNCTION weir_state_bit(state text) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE state
        WHEN 'scheduled' THEN 1
        WHEN 'available' THEN 2
        WHEN 'running' THEN 4
        WHEN 'retryable' THEN 8
        WHEN 'completed' THEN 16
        WHEN 'cancelled' THEN 32
        WHEN 'discarded' THEN 64
    END;
