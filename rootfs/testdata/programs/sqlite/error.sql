SELECT * FROM boom;
