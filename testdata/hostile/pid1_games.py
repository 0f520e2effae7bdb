# PID 1 games. The program is the init of its pid namespace: children try
# to kill it (the kernel ignores, inside the namespace, signals to init it
# has no handler for), it kills every other process with kill(-1, SIGKILL)
# (only its own namespace's: it must not reach the host or other
# sandboxes, which share its host uid), and it leaves zombies unreaped.
import os
import signal
import time

print("pid", os.getpid(), "ppid", os.getppid(), flush=True)
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGSEGV):
    pid = os.fork()
    if pid == 0:
        try:
            os.kill(1, sig)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
print("init survived its children's signals", flush=True)
for _ in range(3):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
os.kill(-1, signal.SIGKILL)  # every process of the namespace but init
time.sleep(0.2)
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
live = [p for p in others if open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
print("left after kill(-1):", len(live), flush=True)
for _ in range(20):  # zombies nobody reaps
    if os.fork() == 0:
        os._exit(0)
time.sleep(0.2)
print("PID1 SURVIVED", flush=True)
