program Boom;
begin
  WriteLn(StdErr, 'boom');
  Halt(3);
end.
