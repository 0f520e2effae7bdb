BEGIN { while (1) print "flood line" }
