# Isolation probe: runs inside a sandbox and reports, as one JSON object,
# what the program can see and do. oci's TestIsolationProbes asserts each
# field; nothing here decides pass or fail.
import errno
import json
import os
import socket


def interfaces():
    # /proc/net/dev lists the network namespace's interfaces under every
    # runtime; a current gVisor has no /sys/class/net with --network=none.
    try:
        with open("/proc/net/dev") as f:
            return sorted(line.split(":")[0].strip() for line in f.readlines()[2:] if ":" in line)
    except OSError:
        return sorted(os.listdir("/sys/class/net"))


def status_field(name):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return None


def try_write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def try_read(path, n=64):
    try:
        with open(path, "rb") as f:
            return len(f.read(n))
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def connect(host, port):
    try:
        s = socket.create_connection((host, port), timeout=1)
        s.close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e)) if e.errno else type(e).__name__


out = {
    "uid": os.getuid(),
    "gid": os.getgid(),
    "euid": os.geteuid(),
    "groups": os.getgroups(),
    "cap_eff": status_field("CapEff"),
    "cap_prm": status_field("CapPrm"),
    "cap_bnd": status_field("CapBnd"),
    "no_new_privs": status_field("NoNewPrivs"),
    "seccomp": status_field("Seccomp"),
    "interfaces": interfaces(),
    "hostname": socket.gethostname(),
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "work": sorted(os.listdir("/work")),
    "write_root": try_write("/etc/sandcell-probe"),
    "write_usr": try_write("/usr/sandcell-probe"),
    "write_tmp": try_write("/tmp/probe"),
    "write_work": try_write("/work/probe"),
    "write_proc_sys": try_write("/proc/sys/kernel/hostname"),
    "write_sysrq": try_write("/proc/sysrq-trigger"),
    "write_sys": try_write("/sys/kernel/profiling"),
    "read_kcore": try_read("/proc/kcore"),
    "read_timer_list": try_read("/proc/timer_list"),
    "read_keys": try_read("/proc/keys"),
    "sys_firmware": os.listdir("/sys/firmware") if os.path.isdir("/sys/firmware") else None,
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "cgroup": open("/proc/self/cgroup").read().strip().splitlines(),
    "dev": sorted(os.listdir("/dev")),
    "host_probe_file": os.path.exists(os.environ.get("HOST_FILE", "/nonexistent")),
    "connect_host_loopback": connect("127.0.0.1", int(os.environ.get("HOST_PORT", "1"))),
    "connect_external": connect("192.0.2.1", 80),  # TEST-NET-1: never routed
    "stdin_is_devnull": os.path.samestat(os.fstat(0), os.stat("/dev/null")),
    "stdin_eof": os.read(0, 1) == b"",
    "open_fds": sorted(int(x) for x in os.listdir("/proc/self/fd")),
}
print(json.dumps(out))
