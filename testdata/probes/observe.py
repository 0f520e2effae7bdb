# Observation probe: runs inside a sandbox and prints, as one JSON object,
# everything about its own process and sandbox that a program can read
# without privileges: identity, capabilities, seccomp and no_new_privs,
# namespaces, rlimits, mounts, /dev, /proc masks, fds, environment, signal
# state, scheduling, prctl flags, keyrings, cgroups, network. Values that
# differ between any two runs by nature (inode and mount numbers, device
# minors of fresh tmpfs, memory counters) are normalised here, so two runs
# of the same spec print the same object. oci's TestForkServerEquivalence
# compares the object field by field between a libcontainer run and a fork
# server run; nothing here decides pass or fail.
#
# Usage: python3 observe.py [SECONDS]  (then sleeps that long, so that the
# test can look at the process from outside: its cgroup, its filter).
import ctypes
import errno
import json
import os
import re
import socket
import stat
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return "error " + errno.errorcode.get(e.errno, str(e.errno))


# /proc/self/status without the fields that count memory or time.
VOLATILE_STATUS = {
    "VmPeak", "VmSize", "VmLck", "VmPin", "VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem",
    "VmData", "VmStk", "VmExe", "VmLib", "VmPTE", "VmSwap", "HugetlbPages",
    "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches",
}


def status():
    out = {}
    for line in read("/proc/self/status").splitlines():
        k, _, v = line.partition(":")
        if k not in VOLATILE_STATUS:
            out[k] = v.strip()
    return out


def mountinfo():
    # Mount ids, parent ids and anonymous device numbers are renumbered in
    # order of appearance; peer group numbers dropped. What is left: the
    # tree's shape, each mount's root, point, options, propagation type,
    # filesystem, source and superblock options.
    lines = read("/proc/self/mountinfo").splitlines()
    ids, devs, out = {}, {}, []
    for line in lines:
        f = line.split()
        ids.setdefault(f[0], len(ids))
    for line in lines:
        pre, _, post = line.partition(" - ")
        f = pre.split()
        dev = f[2]
        if dev.startswith("0:"):
            dev = "anon%d" % devs.setdefault(dev, len(devs))
        opt = " ".join(re.sub(r":\d+$", "", x) for x in f[6:])
        out.append("%s %s %s %s %s %s %s - %s" % (
            ids[f[0]], ids.get(f[1], "outside"), dev, f[3], f[4], f[5], opt, post))
    return out


def dev_listing():
    out = []
    for name in sorted(os.listdir("/dev")):
        p = "/dev/" + name
        st = os.lstat(p)
        e = "%s %o %d:%d" % (name, st.st_mode, st.st_uid, st.st_gid)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            e += " %d,%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
        if stat.S_ISLNK(st.st_mode):
            e += " -> " + os.readlink(p)
        out.append(e)
    return out


def fds():
    out = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = re.sub(r"\[\d+\]", "[]", os.readlink("/proc/self/fd/" + fd))
        except OSError:
            continue  # the listing's own fd
        info = read("/proc/self/fdinfo/" + fd)
        flags = re.search(r"flags:\s*(\d+)", info)
        out[fd] = "%s flags=%s" % (target, flags.group(1) if flags else "?")
    return out


def stat_of(path):
    try:
        st = os.stat(path)
        return "%o %d:%d" % (st.st_mode, st.st_uid, st.st_gid)
    except OSError as e:
        return "error " + errno.errorcode.get(e.errno, str(e.errno))


def prctl(option, arg2=0, arg3=0):
    libc.prctl.restype = ctypes.c_int
    r = libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if r < 0:
        return "error " + errno.errorcode.get(ctypes.get_errno(), "?")
    return r


def pdeathsig():
    sig = ctypes.c_int(-1)
    r = libc.prctl(ctypes.c_int(2), ctypes.byref(sig), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    return sig.value if r == 0 else "error"


def syscall(nr, *args):
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r < 0:
        return "error " + errno.errorcode.get(ctypes.get_errno(), "?")
    return r


def keyring():
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0): the filter
    # denies it; what it says is compared, not judged.
    return syscall(250, 0, -3, 0)


def ipc():
    return {n: read("/proc/sysvipc/" + n).splitlines()[1:] for n in ("shm", "msg", "sem")}


def lo_flags():
    import fcntl
    import struct
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        r = fcntl.ioctl(s.fileno(), 0x8913, struct.pack("16sH14x", b"lo", 0))
        return struct.unpack("16sH14x", r)[1]
    finally:
        s.close()


def namespaces():
    return {n: os.readlink("/proc/self/ns/" + n) for n in sorted(os.listdir("/proc/self/ns"))}


affinity = sorted(os.sched_getaffinity(0))
stat_fields = read("/proc/self/stat").rsplit(")", 1)[1].split()
out = {
    "argv": read("/proc/self/cmdline").split("\0"),
    "environ": read("/proc/self/environ").split("\0"),
    "cwd": os.getcwd(),
    "ids": [os.getresuid(), os.getresgid(), os.getgroups()],
    "status": status(),
    "limits": read("/proc/self/limits").splitlines(),
    "mountinfo": mountinfo(),
    "dev": dev_listing(),
    "fds": fds(),
    "uid_map": read("/proc/self/uid_map").split(),
    "gid_map": read("/proc/self/gid_map").split(),
    "setgroups": read("/proc/self/setgroups").strip(),
    "cgroup": read("/proc/self/cgroup").splitlines(),
    "oom_score_adj": read("/proc/self/oom_score_adj").strip(),
    "coredump_filter": read("/proc/self/coredump_filter").strip(),
    "loginuid": read("/proc/self/loginuid").strip(),
    "sessionid": read("/proc/self/sessionid").strip(),
    "attr": read("/proc/self/attr/current").strip(),
    "timens_offsets": read("/proc/self/timens_offsets").splitlines(),
    "personality": read("/proc/self/personality").strip(),
    # state, ppid, pgrp, session, tty, flags, priority, nice, threads,
    # exit signal, rt priority and policy of /proc/self/stat (fields 3-9,
    # 18-20, 38, 40, 41).
    "stat": [stat_fields[i] for i in (0, 1, 2, 3, 4, 6, 15, 16, 17, 35, 37, 38)],
    "uname": list(os.uname()),
    "domainname": read("/proc/sys/kernel/domainname").strip(),
    "affinity": [len(affinity), affinity[:1], affinity[-1:]],
    "sched": [os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0), syscall(252, 1, 0)],
    "prctl": {
        "dumpable": prctl(3), "keepcaps": prctl(7), "securebits": prctl(27), "no_new_privs": prctl(39),
        "seccomp": prctl(21), "child_subreaper": prctl(37), "thp_disable": prctl(42),
        "timerslack": prctl(30), "pdeathsig": pdeathsig(), "io_flusher": prctl(58),
        "speculation_ssb": prctl(52, 0),
        "capbset": [prctl(23, c) for c in range(0, 41)],
        "ambient": [prctl(47, 1, c) for c in range(0, 41)],
    },
    "umask": status().get("Umask"),
    "keyring": keyring(),
    "ipc": ipc(),
    "net_dev": sorted(l.split(":")[0].strip() for l in read("/proc/net/dev").splitlines()[2:]),
    "lo_flags": lo_flags(),
    "net_unix": read("/proc/net/unix").splitlines()[1:],
    "namespace_kinds": sorted(namespaces()),
    "namespaces": namespaces(),
    "stat_paths": {p: stat_of(p) for p in ("/", "/tmp", "/work", "/dev", "/dev/shm", "/proc", "/sys", "/etc")},
    "masked": {p: stat_of(p) for p in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/acpi", "/sys/firmware", "/proc/sysrq-trigger")},
    "hostname": socket.gethostname(),
}
print(json.dumps(out, sort_keys=True))
sys.stdout.flush()
if len(sys.argv) > 1:
    time.sleep(float(sys.argv[1]))
