read name
echo "hello, $name"
