(use-modules (ice-9 rdelim))
(display (string-append "hello, " (read-line)))
(newline)
