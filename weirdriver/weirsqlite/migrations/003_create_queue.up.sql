-- Queue settings shared by every client. A queue has a row once an operator paused
-- it; the claim checks paused_at.
CREATE TABLE weir_queue (
    name TEXT PRIMARY KEY,
    paused_at INTEGER,
    updated_at INTEGER NOT NULL,
    CONSTRAINT weir_queue_name_check CHECK (length(name) BETWEEN 1 AND 128)
) STRICT;
