-- weir:compatible
-- Adds the job's output and progress, as weirpgx's migration
-- 007_job_output_progress does: nullable JSON text, checked with json_valid.
-- A weir that does not know the columns names its columns in every statement
-- and never reads or writes them.
ALTER TABLE weir_job ADD COLUMN output TEXT
    CONSTRAINT weir_job_output_check CHECK (output IS NULL OR json_valid(output));
ALTER TABLE weir_job ADD COLUMN progress TEXT
    CONSTRAINT weir_job_progress_check CHECK (progress IS NULL OR json_valid(progress));
