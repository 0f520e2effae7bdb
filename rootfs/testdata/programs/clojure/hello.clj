(println (str "hello, " (read-line)))
