#lang racket/base
(error "boom")
