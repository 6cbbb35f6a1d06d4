-- weir:compatible
-- Records, for each migration applied from now on, whether a weir that does not
-- know it may still run against the database, as weirpgx's migration
-- 006_migration_compatible does: the migrator stores the "-- weir:compatible"
-- mark of the migration's header here (1 when marked).
ALTER TABLE weir_migration ADD COLUMN compatible INTEGER NOT NULL DEFAULT 0;
