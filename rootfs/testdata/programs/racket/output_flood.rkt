#lang racket/base
(let loop () (displayln "flood line") (loop))
