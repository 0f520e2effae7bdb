%% the first line of an escript is its header, skipped
main(_) -> loop(0).

loop(N) -> loop(N + 1).
