keep <- list()
repeat { keep[[length(keep) + 1]] <- rep(1, 131072) }
