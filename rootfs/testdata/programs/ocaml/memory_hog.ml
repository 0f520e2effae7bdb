let () =
  let keep = ref [] in
  while true do
    keep := Bytes.make 1048576 'x' :: !keep
  done
