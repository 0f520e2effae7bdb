with Ada.Text_IO; use Ada.Text_IO;
with Ada.Command_Line;

procedure Main is
begin
   Put_Line (Standard_Error, "boom");
   Ada.Command_Line.Set_Exit_Status (3);
end Main;
