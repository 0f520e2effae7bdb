keep = {};
while true
  keep{end+1} = ones(131072, 1);
end
