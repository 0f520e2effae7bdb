n = 0
loop
  n++
