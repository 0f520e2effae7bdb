program Main;
var p: PByte;
begin
  while true do
  begin
    GetMem(p, 1048576);
    FillByte(p^, 1048576, 1);
  end;
end.
