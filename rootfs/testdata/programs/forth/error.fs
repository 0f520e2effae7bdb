s" boom" stderr write-line drop
3 (bye)
