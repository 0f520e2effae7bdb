n = 0
do
  n = n + 1
loop
