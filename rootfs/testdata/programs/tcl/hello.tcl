gets stdin name
puts "hello, $name"
