(let loop () (display "flood line") (newline) (loop))
