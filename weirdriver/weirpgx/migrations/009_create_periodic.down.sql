DROP TABLE weir_periodic;
