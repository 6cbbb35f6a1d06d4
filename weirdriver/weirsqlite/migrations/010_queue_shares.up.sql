-- weir:compatible
-- Shares of a queue's global limit, as weirpgx's migration 015_queue_shares
-- (docs/flow-control.md): how many of the queue's handlers a client may run
-- at once, leased until expires_at (µs since 1970). Written by QueueShare
-- alone, in a write transaction; a client holding a live share claims the
-- queue's jobs without the limit's count, and the count of a client without
-- one is the live shares plus the running jobs of the clients without one.
CREATE TABLE weir_queue_share (
    queue TEXT NOT NULL,
    holder TEXT NOT NULL,
    want INTEGER NOT NULL CHECK (want BETWEEN 1 AND 1000000),
    slots INTEGER NOT NULL CHECK (slots BETWEEN 0 AND 1000000),
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, holder)
);
