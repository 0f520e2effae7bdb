n = 0_u64
loop do
  n &+= 1
end
