program Main;
begin
  while true do
    WriteLn('flood line');
end.
