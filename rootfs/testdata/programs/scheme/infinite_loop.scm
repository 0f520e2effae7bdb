(let loop ((n 0)) (loop (+ n 1)))
