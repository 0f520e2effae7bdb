main(_) ->
    io:format(standard_error, "boom~n", []),
    halt(3).
