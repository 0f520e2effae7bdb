%% the first line of an escript is its header, skipped
main(_) ->
    Line = io:get_line(""),
    io:format("hello, ~s", [Line]).
