n = 0;
while true
  n = n + 1;
end
