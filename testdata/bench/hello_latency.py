#!/usr/bin/env python3
"""Hello-world latency per language (issue #42): p50 of N runs of each
language's rootfs/testdata/programs/<lang>/hello.* (stdin "world"), through
`sandcell run` (a fresh sandbox; compile and run phases for compiled
languages) and, where the host has the language's programs at the
catalogue's paths, on the bare host (the catalogue's compile and run argv
with /work a temporary directory). Prints a Markdown table.

usage: hello_latency.py [-n N] [--sandcell BIN] [--home DIR] LANG...
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def timed(argv, **kw):
    t = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    return time.monotonic() - t, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--sandcell", default=os.path.join(ROOT, "bin", "sandcell"))
    ap.add_argument("--home", default="/var/lib/sandcell")
    ap.add_argument("langs", nargs="+")
    a = ap.parse_args()
    cat = {l["name"]: l for l in json.load(open(os.path.join(ROOT, "rootfs", "languages.json")))["languages"]}
    print("| language | sandcell run p50 | bare host p50 |")
    print("| --- | ---: | ---: |")
    for name in a.langs:
        l = cat[name]
        d = os.path.join(ROOT, "rootfs", "testdata", "programs", name)
        prog = [os.path.join(d, f) for f in os.listdir(d) if f.startswith("hello.")][0]
        times = []
        for _ in range(a.n):
            dt, p = timed([a.sandcell, "--home", a.home, "--no-build", "run", "--lang", name, "--stdin", "-", prog], input="world\n")
            if p.stdout != "hello, world\n":
                sys.exit(f"{name}: sandcell run: {p.returncode} {p.stdout!r} {p.stderr!r}")
            times.append(dt)
        sc = statistics.median(times)
        bare = "no toolchain on the host"
        argvs = ([l["compile"]] if l.get("compile") else []) + [l["run"]]
        if all(os.path.exists(v[0]) for v in argvs) and not any(v[0] == "/work/main" for v in argvs[:-1]):
            btimes = []
            for _ in range(a.n):
                w = tempfile.mkdtemp()
                shutil.copy(prog, os.path.join(w, l["source"]))
                fix = lambda v: [x.replace("/work", w) for x in v]
                env = dict(os.environ, **dict(e.split("=", 1) for e in l.get("env", [])))
                t = time.monotonic()
                ok = True
                for i, v in enumerate(argvs):
                    if v[0] == "/work/main":
                        v = [os.path.join(w, "main")] + v[1:]
                    try:
                        p = subprocess.run(fix(v), capture_output=True, text=True, timeout=300, cwd=w, env=env,
                                           input="world\n" if i == len(argvs) - 1 else "")
                    except OSError:
                        ok = False
                        break
                    ok = ok and p.returncode == 0
                btimes.append(time.monotonic() - t)
                shutil.rmtree(w)
                if not ok or p.stdout != "hello, world\n":
                    btimes = None
                    break
            if btimes:
                bare = f"{statistics.median(btimes) * 1000:.0f} ms"
            else:
                bare = "host toolchain differs (failed)"
        print(f"| {name} | {sc * 1000:.0f} ms | {bare} |", flush=True)


if __name__ == "__main__":
    main()
