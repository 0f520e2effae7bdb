(loop [] (println "flood line") (recur))
