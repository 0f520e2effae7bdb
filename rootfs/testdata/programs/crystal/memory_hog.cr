keep = [] of Bytes
loop do
  keep << Bytes.new(1048576, 1_u8)
end
