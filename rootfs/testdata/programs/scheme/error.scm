(display "boom\n" (current-error-port))
(exit 3)
