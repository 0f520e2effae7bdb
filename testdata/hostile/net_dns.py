# Name resolution: with no route and no resolver reachable, a lookup must
# fail quickly instead of sending DNS queries anywhere (DNS is a favourite
# exfiltration channel).
import socket
import time

start = time.monotonic()
try:
    socket.getaddrinfo("sandcell-exfil.example.com", 443)
    print("resolved ESCAPED", flush=True)
except socket.gaierror as e:
    print("DNS_FAILED", e.args[0] < 0, flush=True)
ms = (time.monotonic() - start) * 1000
print("SLOW" if ms > 2000 else "fast", flush=True)
