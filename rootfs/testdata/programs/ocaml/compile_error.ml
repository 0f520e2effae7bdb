let () = print_endline (1 + "a")
