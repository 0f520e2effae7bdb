(format t "hello, ~a~%" (read-line))
