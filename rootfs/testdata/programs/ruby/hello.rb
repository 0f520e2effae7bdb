line = $stdin.gets.chomp
puts "hello, #{line}"
