while (true) println "flood line"
