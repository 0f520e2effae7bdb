my @keep;
loop { @keep.push: Buf.allocate(1048576, 1) }
