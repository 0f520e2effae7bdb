name <- readLines(file("stdin"), n = 1)
cat("hello, ", name, "\n", sep = "")
