#lang racket/base
(printf "hello, ~a\n" (read-line))
