ALTER TABLE weir_migration DROP COLUMN compatible;
