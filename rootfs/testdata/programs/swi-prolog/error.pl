:- initialization(main, main).

main :- format(user_error, "boom~n", []), halt(3).
