CREATE TABLE input(line TEXT);
.import "|/bin/cat" input
SELECT 'hello, ' || line FROM input LIMIT 1;
