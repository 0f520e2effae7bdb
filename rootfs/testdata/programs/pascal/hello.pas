program Hello;
var
  name: string;
begin
  ReadLn(name);
  WriteLn('hello, ', name);
end.
