do
  print "flood line"
loop
