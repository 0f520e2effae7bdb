# A run of a session holding 48 MiB: the files it starts with are in its
# memory (its peak says so).
ls -l /work/big | awk '{print "big", $5}'
