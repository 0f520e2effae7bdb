keep = []
loop
  keep.push Buffer.alloc(1 << 20, 1)
