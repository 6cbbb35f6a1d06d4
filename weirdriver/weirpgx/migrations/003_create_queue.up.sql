-- Queue settings shared by every client. A queue has a row once an operator paused
-- it; the claim checks paused_at.
CREATE TABLE weir_queue (
    name text PRIMARY KEY,
    paused_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT weir_queue_name_check CHECK (char_length(name) BETWEEN 1 AND 128)
);
