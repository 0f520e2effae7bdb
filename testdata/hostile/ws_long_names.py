# Huge names in a session's /work: 255-byte names (NAME_MAX), a 256-byte
# name (ENAMETOOLONG from the kernel), and a deep tree whose paths stay
# just under PATH_MAX. The save, list_files and read_file must cope.
import errno
import os

os.chdir("/work")
long = "n" * 255
open(long, "w").write("long name\n")
os.mkdir("d" * 255)
open(os.path.join("d" * 255, long), "w").write("long in long\n")
try:
    open("x" * 256, "w")
    print("256-byte name ESCAPED", flush=True)
except OSError as e:
    print("256-byte name", errno.errorcode[e.errno], flush=True)
# 120 levels of 31-byte names: 3840 bytes of path below /work.
seg = "s" * 30
for _ in range(120):
    os.mkdir(seg)
    os.chdir(seg)
open("deep.txt", "w").write("deep\n")
print("deep path bytes", len(os.getcwd()) - len("/work/") + len("/deep.txt"), flush=True)
