# Host files must stay out of reach: the test writes a secret into a host
# file (HOST_CANARY, never mounted) and the program tries it directly and
# through every detour out of its root: /proc/1/root, /proc/self/root,
# /proc/self/cwd, a long "../" climb, the parent of /work (a bind mount of
# a host directory) and /proc/self/mountinfo's host paths.
import os

target = os.environ["HOST_CANARY"]
tries = [
    target,
    "/proc/1/root" + target,
    "/proc/self/root" + target,
    "/proc/self/cwd/" + "../" * 30 + target.lstrip("/"),
    "/work/" + "../" * 30 + target.lstrip("/"),
    "/tmp/" + "../" * 30 + target.lstrip("/"),
]
for p in tries:
    try:
        data = open(p).read()
        print("read", p, "ESCAPED" if data else "empty", flush=True)
    except OSError as e:
        print("read", p.replace(target, "CANARY"), os.strerror(e.errno), flush=True)
# Host paths named in mountinfo are names only; none may be reachable.
for line in open("/proc/self/mountinfo"):
    root = line.split()[3]
    if root not in ("/",) and os.path.exists(root + "/" + os.path.basename(target)):
        print("host file through a mount root", root, "ESCAPED", flush=True)
print("host files done", flush=True)
