var keep: seq[string]
while true:
  keep.add(newString(1048576))
  for i in 0 ..< keep[^1].len: keep[^1][i] = 'x'
