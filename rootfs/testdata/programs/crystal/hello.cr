name = gets
puts "hello, #{name}"
