# Kernel information the sandbox must not read (Docker's masked paths):
# /proc/kcore (host memory), /proc/timer_list and /proc/sched_debug (other
# processes' timers and tasks), /proc/keys, /sys/firmware (ACPI tables,
# EFI variables), kernel addresses in /proc/kallsyms (KASLR), the kernel
# log (/proc/kmsg, dmesg) and debugfs.
import os


def size(path):
    try:
        with open(path, "rb") as f:
            return str(len(f.read(4096)))
    except OSError as e:
        return os.strerror(e.errno).replace(" ", "_")


for p in ("/proc/kcore", "/proc/timer_list", "/proc/sched_debug", "/proc/keys", "/proc/kmsg", "/proc/latency_stats", "/proc/interrupts"):
    s = size(p)
    print(p, s, "ESCAPED" if s.isdigit() and s != "0" else "", flush=True)
for d in ("/sys/firmware", "/sys/kernel/debug", "/sys/kernel/security"):
    try:
        ents = os.listdir(d)
    except OSError as e:
        ents = []
    print(d, len(ents), "ESCAPED" if ents and d == "/sys/firmware" else "", flush=True)
    if ents and d != "/sys/firmware":
        # debugfs and securityfs are not mounted in a sandbox's sysfs
        print(d, "mounted ESCAPED", flush=True)
leaked = 0
try:
    for line in open("/proc/kallsyms"):
        if int(line.split()[0], 16) != 0:
            leaked += 1
            break
except OSError:
    pass
print("kallsyms addresses", "visible ESCAPED" if leaked else "hidden", flush=True)
