n <- 0
repeat { n <- n + 1 }
