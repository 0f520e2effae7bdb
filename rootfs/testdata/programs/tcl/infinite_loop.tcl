set n 0
while 1 { incr n }
