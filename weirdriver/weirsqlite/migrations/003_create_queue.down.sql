DROP TABLE weir_queue;
