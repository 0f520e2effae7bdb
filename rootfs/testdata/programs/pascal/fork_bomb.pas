program Main;
uses BaseUnix;
begin
  while true do
    FpFork;
end.
