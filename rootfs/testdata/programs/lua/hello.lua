local line = io.read("l")
print("hello, " .. line)
