# Grows one python list a MiB at a time until the memory limit ends it.
exec python3 -c '
chunks = []
while True:
    chunks.append(bytearray(1 << 20))
'
