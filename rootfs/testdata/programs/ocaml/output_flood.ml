let () = while true do print_endline "flood line" done
