# Sleeps without using CPU: only the wall clock can end it, and it must,
# within the limit plus a little.
sleep 100000
echo "slept through the limit ESCAPED"
