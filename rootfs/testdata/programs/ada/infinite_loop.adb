procedure Main is
   N : Long_Long_Integer := 0 with Volatile;
begin
   loop
      N := N + 1;
   end loop;
end Main;
