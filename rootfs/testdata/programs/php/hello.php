<?php
$line = trim(fgets(STDIN));
echo "hello, $line\n";
