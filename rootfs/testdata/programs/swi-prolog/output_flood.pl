:- initialization(main, main).

main :- repeat, writeln('flood line'), fail.
