:- initialization(main, main).

loop(N) :- N1 is N + 1, loop(N1).

main :- loop(0).
