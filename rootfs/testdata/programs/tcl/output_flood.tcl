while 1 { puts "flood line" }
