name = IO.gets("") |> String.trim()
IO.puts("hello, #{name}")
