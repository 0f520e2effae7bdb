procedure Main is
   X : Integer := "a";
begin
   null;
end Main;
