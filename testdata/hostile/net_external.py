# Egress: the sandbox's network namespace has only a loopback, so a
# connect to any outside address must fail at once with "network is
# unreachable" (no route), without a packet leaving: TEST-NET-1
# (192.0.2.1, never routed), a public resolver (1.1.1.1), the cloud
# metadata service (169.254.169.254, the classic SSRF target for cloud
# credentials) and an IPv6 documentation address. "SLOW" would mean a
# packet went out and the call waited for an answer.
import errno
import socket
import time


def attempt(kind, family, addr):
    s = socket.socket(family, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    s.settimeout(3)
    start = time.monotonic()
    try:
        if kind == "tcp":
            s.connect(addr)
        else:
            s.sendto(b"sandcell", addr)
        res = "ok ESCAPED"
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e))
    ms = (time.monotonic() - start) * 1000
    print(f"{kind} {addr[0]}:{addr[1]} {res}{' SLOW' if ms > 1000 else ''}", flush=True)
    s.close()


for host, port in (("192.0.2.1", 80), ("1.1.1.1", 53), ("1.1.1.1", 443), ("169.254.169.254", 80), ("8.8.8.8", 53)):
    attempt("tcp", socket.AF_INET, (host, port))
    attempt("udp", socket.AF_INET, (host, port))
attempt("tcp", socket.AF_INET6, ("2001:db8::1", 80))
attempt("udp", socket.AF_INET6, ("2001:db8::1", 53))
