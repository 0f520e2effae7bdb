# Inode exhaustion: empty files cost no tmpfs pages, only inodes and
# dentries, which the kernel charges to the run's memory cgroup. Creating
# them without end must be stopped by the tmpfs or the memory limit (or
# the wall clock), never reach the host's inode or slab budget.
import errno
import os
import time

os.makedirs("/tmp/flood", exist_ok=True)
start, n = time.time(), 0
try:
    while True:
        open(f"/tmp/flood/{n}", "w").close()
        n += 1
        if n % 20000 == 0:
            print(f"created {n}", flush=True)
except OSError as e:
    print(f"INODES_LIMITED after {n}: {errno.errorcode.get(e.errno, e.errno)}", flush=True)
