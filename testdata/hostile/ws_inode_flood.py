# More entries than a session may hold (100000 by default): empty files
# cost no bytes of the quota, only entries. The save must refuse the tree
# (the session keeps its old files) and the result must say so, without
# copying without end.
import os

os.makedirs("/work/flood", exist_ok=True)
for i in range(100500):
    open(f"/work/flood/{i}", "w").close()
print("created 100500 files", flush=True)
