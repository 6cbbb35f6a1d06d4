DROP TABLE weir_job;
