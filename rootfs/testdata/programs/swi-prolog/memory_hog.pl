:- initialization(main, main).

hog(L) :- length(X, 100000), maplist(=(1), X), hog([X|L]).

main :- hog([]).
