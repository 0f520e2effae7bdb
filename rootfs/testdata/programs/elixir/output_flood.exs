Stream.repeatedly(fn -> IO.puts("flood line") end) |> Stream.run()
