with Ada.Text_IO; use Ada.Text_IO;

procedure Main is
begin
   Put_Line ("hello, " & Get_Line);
end Main;
