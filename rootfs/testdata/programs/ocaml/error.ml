let () = prerr_endline "boom"; exit 3
