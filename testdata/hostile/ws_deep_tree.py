# A tree deeper than PATH_MAX in a session's /work: each mkdir is relative
# (the kernel allows any depth that way), but no path of the tree fits in
# 4096 bytes, so the workspace cannot hold it. The save must refuse it
# cleanly (the session keeps its old files, the result says so) without
# recursing without bound or crashing the server.
import os

os.chdir("/work")
open("before.txt", "w").write("kept\n")
seg = "p" * 200
for _ in range(30):  # 6030 bytes
    os.mkdir(seg)
    os.chdir(seg)
open("too-deep.txt", "w").write("too deep\n")
print("built", len(os.getcwd()), "bytes deep", flush=True)
