var n = 0
while true:
  inc n
  if n < 0: echo n
