with Ada.Text_IO; use Ada.Text_IO;
procedure Main is
begin
   loop
      Put_Line ("flood line");
   end loop;
end Main;
