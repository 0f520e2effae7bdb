import sys
print("hello, " + sys.stdin.readline().strip())
