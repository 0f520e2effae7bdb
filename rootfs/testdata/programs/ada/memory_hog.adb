procedure Main is
   type Block is array (1 .. 1_048_576) of Character;
   type Block_Access is access Block;
   P : Block_Access;
begin
   loop
      P := new Block'(others => 'x');
   end loop;
end Main;
