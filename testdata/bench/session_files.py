# Server CPU and response size of a session run that creates N files with
# long names (1.3 KB paths) and prints nothing (issue #17), for one sandcell
# binary: `sudo python3 testdata/bench/session_files.py BINARY N` (root, the
# python layer built in /var/lib/sandcell). It serves MCP on stdio with a
# private state dir, home and cgroup parent, and prints one JSON line:
# response_bytes (the tools/call response on the wire) and server_cpu_s (the
# server's own threads, utime+stime of /proc/PID/stat, not the sandbox's).
# PERF=FILE also records `perf record -g` of the server during the call.
import json, os, subprocess, sys, tempfile, time
binary, n = sys.argv[1], int(sys.argv[2])
state = tempfile.mkdtemp(dir="/run", prefix="sc17m-")
home = tempfile.mkdtemp(prefix="sc17h-")
os.symlink("/var/lib/sandcell/rootfs", home + "/rootfs")
p = subprocess.Popen([binary, "--state-dir", state, "--home", home, "--cgroup-parent", "/" + os.path.basename(state), "serve"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
def call(i, method, params):
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode()); p.stdin.flush()
    while True:
        line = p.stdout.readline()
        m = json.loads(line)
        if m.get("id") == i:
            return m, len(line)
def cpu():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "m", "version": "1"}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); p.stdin.flush()
m, _ = call(1, "tools/call", {"name": "create_session", "arguments": {"language": "python"}})
sid = m["result"]["structuredContent"]["session_id"]
src = f"""import os
d = "/".join(["x" * 250] * 5)
os.makedirs(d)
for i in range({n}):
    open(f"{{d}}/{{i:05d}}", "w").close()
"""
perf = None
if os.environ.get("PERF"):
    perf = subprocess.Popen(["perf", "record", "-g", "-q", "-o", os.environ["PERF"], "-p", str(p.pid)], stderr=subprocess.DEVNULL)
    time.sleep(1)
c0, t0 = cpu(), time.time()
m, size = call(2, "tools/call", {"name": "execute_code", "arguments": {"language": "python", "session_id": sid, "source": src, "timeout_ms": 120000}})
c1, t1 = cpu(), time.time()
if perf:
    perf.send_signal(2); perf.wait()
r = m.get("result", {})
sc = r.get("structuredContent", {})
print(json.dumps({"binary": os.path.basename(binary), "files": n, "status": sc.get("status"), "listed": len(sc.get("files") or []),
                  "response_bytes": size, "server_cpu_s": round(c1 - c0, 2), "wall_s": round(t1 - t0, 2),
                  "error": (m.get("error") or {}).get("message", "")[:200]}))
p.stdin.close(); p.wait(timeout=60)
subprocess.run(["rm", "-rf", home, state])
# The server's cgroup parent, empty once it closed (it is not removed by
# the server: another instance may share a parent).
parent = "/" + os.path.basename(state)
for d in ["/sys/fs/cgroup" + parent] + [os.path.join("/sys/fs/cgroup", h) + parent for h in os.listdir("/sys/fs/cgroup")]:
    try:
        os.rmdir(d)
    except OSError:
        pass
