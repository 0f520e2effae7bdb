# The server's own environment must not reach the program: the test puts
# a secret in the server process's environment (SANDCELL_HOSTILE_SECRET);
# the program looks for it in its environment and in every process's
# environ and cmdline it can read.
import os

found = [k for k in os.environ if "SANDCELL_HOSTILE" in k]
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
    for f in ("environ", "cmdline"):
        try:
            if b"SANDCELL_HOSTILE_SECRET" in open(f"/proc/{pid}/{f}", "rb").read():
                found.append(f"/proc/{pid}/{f}")
        except OSError:
            pass
print("env keys:", " ".join(sorted(os.environ)), flush=True)
print(f"server secret found in {found} ESCAPED" if found else "server secret not found", flush=True)
