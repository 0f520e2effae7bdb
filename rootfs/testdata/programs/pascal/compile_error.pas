program Broken;
var
  x: integer;
begin
  x := 'a';
end.
