program Main;
var n: QWord;
begin
  n := 0;
  while true do
    Inc(n);
end.
