def name = System.in.newReader().readLine()
println "hello, ${name}"
