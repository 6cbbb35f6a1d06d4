DROP TABLE weir_leader;
