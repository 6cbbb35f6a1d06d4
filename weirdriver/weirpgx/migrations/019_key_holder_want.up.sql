-- weir:compatible
-- What each client that holds buckets of a queue's keys wants: its
-- MaxWorkers for the queue. The buckets are divided in proportion to it
-- (weirdriver.KeyPart; docs/flow-control.md, "How key shares keep them"),
-- one each first, instead of evenly. NULL: the client did not say (a weir
-- before this migration), and counts as wanting the others' mean.
ALTER TABLE weir_key_holder ADD COLUMN want integer CHECK (want BETWEEN 1 AND 1000000);
