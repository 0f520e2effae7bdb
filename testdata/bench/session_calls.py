# Latency and CPU of an agent's calls, session and one-shot (issue #18), for
# one or more sandcell binaries side by side:
#   sudo python3 testdata/bench/session_calls.py [-n N] [-rounds R] BINARY...
# (root, the sh layer built in /var/lib/sandcell). Each round starts each
# binary's `serve` on stdio with its defaults and a private state dir,
# sessions dir and cgroup parent (removed after), then times N execute_code
# calls in one sh session and N one-shot calls, after 3 warm-up calls each.
# It prints per binary and round the p50 of each and the server's CPU per
# call: the server's and its reaped processes' (the runs) utime+stime over
# the server's whole life, its start included.
import json, os, resource, shutil, statistics, subprocess, sys, tempfile, time

args = sys.argv[1:]
n, rounds = 60, 3
while args and args[0].startswith("-"):
    flag, value, args = args[0], int(args[1]), args[2:]
    n, rounds = (value, rounds) if flag == "-n" else (n, value)
if not args:
    sys.exit("usage: session_calls.py [-n N] [-rounds R] BINARY...")
SOURCE = "echo hi > out.txt; cat out.txt"


def serve(binary, session):
    state = tempfile.mkdtemp(dir="/run", prefix="sandcell-sessbench-")
    sessions = tempfile.mkdtemp(prefix="sandcell-sessbench-")
    parent = "/" + os.path.basename(state)
    p = subprocess.Popen([binary, "--state-dir", state, "--cgroup-parent", parent, "--sessions-dir", sessions, "serve", "--stdio"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    ids = iter(range(1, 1 << 30))

    def call(method, params):
        i = next(ids)
        p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
        p.stdin.flush()
        while True:
            m = json.loads(p.stdout.readline())
            if m.get("id") == i:
                if "result" not in m:
                    sys.exit(f"{binary}: {method}: {m}")
                return m["result"]

    try:
        call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "sessbench", "version": "1"}})
        p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        p.stdin.flush()
        arguments = {"language": "sh", "source": SOURCE}
        if session:
            r = call("tools/call", {"name": "create_session", "arguments": {"language": "sh"}})
            arguments["session_id"] = r["structuredContent"]["session_id"]
        times = []
        for k in range(n + 3):
            t = time.perf_counter()
            r = call("tools/call", {"name": "execute_code", "arguments": arguments})
            d = time.perf_counter() - t
            if r["structuredContent"].get("stdout") != "hi\n":
                sys.exit(f"{binary}: execute_code: {r}")
            if k >= 3:
                times.append(d * 1000)
        p.stdin.close()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p.wait(timeout=60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000 / (n + 3)
        return statistics.median(times), cpu
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(sessions, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
        for root in os.listdir("/sys/fs/cgroup"):
            try:
                os.rmdir(os.path.join("/sys/fs/cgroup", root) + parent)
            except OSError:
                pass
        try:
            os.rmdir("/sys/fs/cgroup" + parent)
        except OSError:
            pass


for r in range(rounds):
    for b in args:
        s, sc = serve(b, True)
        o, oc = serve(b, False)
        print(f"round {r + 1} {b}: session p50 {s:.2f} ms, CPU {sc:.2f} ms per call | one-shot p50 {o:.2f} ms, CPU {oc:.2f} ms per call")
