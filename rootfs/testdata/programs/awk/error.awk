BEGIN { print "boom" > "/dev/stderr"; exit 3 }
