my @keep;
loop { @keep.push: Buf.new(1 xx 1048576) }
