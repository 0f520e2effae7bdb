%% the first line of an escript is its header, skipped
main(_) -> flood().

flood() -> io:format("flood line~n"), flood().
