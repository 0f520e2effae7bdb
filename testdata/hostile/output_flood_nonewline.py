# One endless line without a newline: a reader that splits on lines would
# buffer it all. The cap counts bytes, not lines.
import sys

chunk = b"A" * 65536
while True:
    sys.stdout.buffer.write(chunk)
