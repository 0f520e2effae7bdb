(let loop ((keep (list))) (loop (cons (make-string 1048576 #\x) keep)))
