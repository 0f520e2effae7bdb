read -r line
echo "hello, $line"
