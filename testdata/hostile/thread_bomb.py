# Threads until the pids cgroup refuses (threads count as pids): Python
# raises RuntimeError "can't start new thread"; the program reports it and
# exits 1, and the verdict must name the process/thread limit.
import sys
import threading
import time

n = 0
try:
    while n < 100000:
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        n += 1
except RuntimeError as e:
    print(f"THREADS_LIMITED after {n}: {e}", flush=True)
    sys.exit(1)
print(f"started {n} threads: no limit ESCAPED", flush=True)
