(loop (write-line "flood line"))
