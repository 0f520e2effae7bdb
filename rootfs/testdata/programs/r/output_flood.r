repeat cat("flood line\n")
