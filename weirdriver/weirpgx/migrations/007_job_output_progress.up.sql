-- weir:compatible
-- Adds the job's output (weir.RecordOutput: the JSON value the attempt that
-- completed the job recorded, written with the completion) and its progress
-- (weir.SetProgress: the latest checkpoint a handler recorded, written with
-- lease renewals and outcomes under the lease, and handed to the next
-- attempt). Both are nullable and no index holds them, so a renewal that
-- writes progress can stay a HOT update; a weir that does not know the
-- columns names its columns in every statement and never reads or writes
-- them.
ALTER TABLE weir_job
    ADD COLUMN output jsonb,
    ADD COLUMN progress jsonb;
