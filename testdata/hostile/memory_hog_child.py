# The hog runs as a child and the parent exits 0 whatever happens to it:
# the verdict must come from the cgroup's OOM-kill counter, not from the
# exit code (a wrapper script hides the kill).
import subprocess
import sys

hog = "x = []\nwhile True: x.append(b'\\x01' * (16 << 20))\n"
rc = subprocess.run([sys.executable, "-c", hog]).returncode
print(f"child ended with {rc}; parent exits 0", flush=True)
