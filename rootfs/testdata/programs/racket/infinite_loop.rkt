#lang racket/base
(let loop ([n 0]) (loop (add1 n)))
