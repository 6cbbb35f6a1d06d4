-- weir:compatible
-- Records, for each migration applied from now on, whether a weir that does not
-- know it may still run against the schema: the migrator stores the
-- "-- weir:compatible" mark of the migration's header here, and a client that
-- finds newer migrations than it knows starts only if every one is marked.
-- Rows recorded before this column existed read false; every weir that reads the
-- column knows those migrations. Adding a column with a default leaves the
-- statements of older weirs working.
ALTER TABLE weir_migration ADD COLUMN compatible boolean NOT NULL DEFAULT false;
