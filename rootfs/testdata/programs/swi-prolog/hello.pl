:- initialization(main, main).

main :- read_line_to_string(user_input, Name), format("hello, ~w~n", [Name]).
