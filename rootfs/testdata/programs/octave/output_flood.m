while true
  printf("flood line\n");
end
