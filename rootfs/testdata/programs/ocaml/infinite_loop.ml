let rec loop n = loop (n + 1)
let () = loop 0
