# The host's loopback: the test listens on host 127.0.0.1 and ::1 ports
# and an abstract Unix socket (HOST_PORT, HOST_PORT6, HOST_ABSTRACT). The
# sandbox's loopback is its own (a fresh network namespace), so every
# connect is refused, and the host listeners see no connection (the test
# checks). Listening on the same port in the sandbox works: it is another
# stack.
import errno
import os
import socket


def connect(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr)
        return "ok ESCAPED"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()


port, port6 = int(os.environ["HOST_PORT"]), int(os.environ["HOST_PORT6"])
print("connect host 127.0.0.1", connect(socket.AF_INET, ("127.0.0.1", port)), flush=True)
print("connect host ::1", connect(socket.AF_INET6, ("::1", port6)), flush=True)
print("connect host abstract", connect(socket.AF_UNIX, "\0" + os.environ["HOST_ABSTRACT"]), flush=True)
# Its own loopback works, on the very same port.
srv = socket.socket()
srv.bind(("127.0.0.1", port))
srv.listen(1)
c = socket.create_connection(("127.0.0.1", port), timeout=2)
conn, _ = srv.accept()
c.sendall(b"ping")
print("own loopback", conn.recv(4).decode(), flush=True)
