# Neighbour probe: two runs at once, one leaving traces, the other looking
# for them. oci's TestForkServerIsolation judges what "look" prints.
#
#   python3 neighbour.py hold   leaves a process, files in /tmp, /work and
#                               /dev/shm, System V IPC objects, an abstract
#                               and a path Unix socket, a TCP listener on
#                               loopback; prints "ready PORT" and sleeps
#   python3 neighbour.py look PORT
#                               (and the keyrings it can view)
#                               prints, as JSON, everything of those it sees
import ctypes
import errno
import json
import os
import socket
import subprocess
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, IPC_PRIVATE_KEY = 0o1000, 0x5A4E4342


def hold():
    subprocess.Popen(["/bin/sleep", "30"])
    for d in ("/tmp", "/work", "/dev/shm"):
        with open(d + "/neighbour-secret", "w") as f:
            f.write("secret")
    libc.shmget(IPC_PRIVATE_KEY, 4096, IPC_CREAT | 0o666)
    libc.msgget(IPC_PRIVATE_KEY, IPC_CREAT | 0o666)
    libc.semget(IPC_PRIVATE_KEY, 1, IPC_CREAT | 0o666)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0sandcell-neighbour")
    abstract.listen(1)
    path = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.bind("/tmp/neighbour.sock")
    path.listen(1)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(1)
    print("ready", tcp.getsockname()[1], flush=True)
    time.sleep(30)


def connect(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(addr)
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()


def keys():
    """The descriptions of the keys and keyrings this process can view."""
    try:
        return sorted(l.split(None, 8)[8].split(":")[0] for l in open("/proc/keys").read().splitlines())
    except OSError as e:
        return [errno.errorcode.get(e.errno, str(e))]


def look(port):
    out = {
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "comms": sorted(open("/proc/%s/comm" % p).read().strip() for p in os.listdir("/proc") if p.isdigit()),
        "tmp": sorted(os.listdir("/tmp")),
        "work": sorted(os.listdir("/work")),
        "shm": sorted(os.listdir("/dev/shm")),
        "sysvipc": {n: open("/proc/sysvipc/" + n).read().splitlines()[1:] for n in ("shm", "msg", "sem")},
        "shmget": libc.shmget(IPC_PRIVATE_KEY, 4096, 0),
        "net_unix": [l.split()[-1] for l in open("/proc/net/unix").read().splitlines()[1:] if len(l.split()) > 7],
        "abstract": connect(socket.AF_UNIX, "\0sandcell-neighbour"),
        "tcp": connect(socket.AF_INET, ("127.0.0.1", int(port))),
        "tcp_listeners": [l.split()[1] for l in open("/proc/net/tcp").read().splitlines()[1:] if l.split()[3] == "0A"],
        "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
        "cgroup": open("/proc/self/cgroup").read().splitlines(),
        "hostname": socket.gethostname(),
        "keys": keys(),
    }
    print(json.dumps(out, sort_keys=True))


if sys.argv[1] == "hold":
    hold()
else:
    look(sys.argv[2])
