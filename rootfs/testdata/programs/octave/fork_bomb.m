while true
  fork();
end
