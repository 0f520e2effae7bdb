#lang racket/base
(let loop ([keep '()]) (loop (cons (make-bytes 1048576 1) keep)))
