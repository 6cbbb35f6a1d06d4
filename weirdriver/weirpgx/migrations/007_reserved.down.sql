-- The stand-in for migration 7 changed nothing; neither does its revert.
SELECT 1;
