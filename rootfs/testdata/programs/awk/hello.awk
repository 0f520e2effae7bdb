NR == 1 { print "hello, " $0; exit }
