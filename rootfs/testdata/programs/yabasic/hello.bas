line input "" name$
print "hello, " + name$
