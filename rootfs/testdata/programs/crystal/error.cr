STDERR.puts "boom"
exit 3
