# Other processes' /proc: in its own pid namespace the program sees only
# its own processes. Host processes (init, sshd, the server itself), other
# sandboxes, or the host's listening sockets in /proc/net/tcp would leak.
import os

host_names = {"systemd", "init", "sshd", "kthreadd", "containerd", "dockerd", "sandcell", "sandcell.test", "go", "runc", "runsc"}
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
names = {}
for p in pids:
    try:
        names[p] = open(f"/proc/{p}/comm").read().strip()
    except OSError:
        pass
print("pids", len(pids), "names", sorted(set(names.values())), flush=True)
if len(pids) > 10:
    print("more processes than its own ESCAPED", flush=True)
for p, n in names.items():
    if n in host_names:
        print(f"host process {p} {n} visible ESCAPED", flush=True)
port = int(os.environ.get("HOST_PORT", "0"))
listening = []
for f in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        for line in open(f).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":  # LISTEN
                listening.append(int(local.rsplit(":", 1)[1], 16))
    except OSError:
        pass
print("listening ports", sorted(listening), flush=True)
if port and port in listening:
    print("host listener visible in /proc/net/tcp ESCAPED", flush=True)
