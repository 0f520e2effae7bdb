let name = stdin.readLine()
echo "hello, ", name
