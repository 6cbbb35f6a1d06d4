-- weir:compatible
-- Number 7 is taken by a migration being written at the same time as 008; this
-- stand-in keeps the numbers without gaps until that one takes its place, and
-- changes nothing.
SELECT 1;
