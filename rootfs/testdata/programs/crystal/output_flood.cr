loop do
  puts "flood line"
end
