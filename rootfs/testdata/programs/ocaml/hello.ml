let () = print_endline ("hello, " ^ read_line ())
