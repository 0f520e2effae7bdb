#!/usr/bin/env python3
"""Where the CPU of a fresh run goes: by process and by mode (kernel or user).

Records every CPU (perf record -a -g) while sandcell-bench makes N fresh runs
of one case, then sums perf's samples by the role of the process they hit:

  server    the harness's own process: sandcell's server code, in-process
  zygote    the fork server's main thread (its clone3, id maps, replies)
  child     a run's process between clone3 and exec (the set-up that mirrors
            runc's init: mounts, pivot, masks, seccomp...)
  program   the run's program after exec, its exit and its namespaces' end
  keeper    the keeper (runs end with sandcell)
  kernel    kernel threads (kworkers, ksoftirqd, rcu): work the runs cause
            but that no process is charged for, so sandcell-bench's CPU
            column does not count it
  other     everything else on the machine meanwhile

A sample is kernel time when its stack went through a system call, a fault or
an interrupt entry, user time otherwise. Totals are divided by the runs made
(N plus the harness's warm-up run); start-up is included, spread over them.
perf's own sampling makes every process somewhat slower: compare the rows
with each other, and take absolute CPU from sandcell-bench without perf.

    sudo python3 testdata/bench/cpu_split.py --bench ./bin/sandcell-bench -n 600 -- \\
        --home /var/lib/sandcell --state-dir /run/sandcell-cpu --cgroup-parent /sandcell-cpu

(BENCHMARKS.md, "CPU per run: kernel and user".) Needs perf (linux-perf).
"""

import argparse
import collections
import os
import subprocess
import sys
import tempfile

ENTRY = ("entry_SYSCALL", "asm_exc_", "asm_sysvec_", "asm_common_interrupt", "ret_from_fork",
         "do_syscall_64", "irqentry_", "exit_to_user_mode")
KERNEL_THREADS = ("kworker", "ksoftirqd", "rcu_", "migration", "kcompactd", "kswapd", "cpuhp")


def samples(script):
    """Yields (comm, tid, period ns, stack leaf first) from perf script's text."""
    head, stack = None, []
    for line in script.splitlines():
        if not line.strip():
            if head:
                yield (*head, stack)
            head, stack = None, []
            continue
        if head is None:
            f = line.split()
            # comm may hold spaces: the last two fields are tid and period
            head = (" ".join(f[:-2]), f[-2], int(f[-1]))
            continue
        frame = line.strip().split(" ", 1)
        stack.append(frame[1] if len(frame) == 2 else frame[0])
    if head:
        yield (*head, stack)


def top_call(stack):
    """The system call (or fault) a kernel sample is in, else None."""
    for i, f in enumerate(stack):
        if f == "do_syscall_64":
            below = [g for g in stack[:i] if g != "x64_sys_call"]  # the dispatch table's frame
            return below[-1] if below else f
        if f.startswith("asm_exc_page_fault"):
            return "page fault"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default="./bin/sandcell-bench")
    ap.add_argument("-n", type=int, default=600)
    ap.add_argument("--lang", default="true")
    ap.add_argument("--program", default="true", help="the program's comm after exec")
    ap.add_argument("--top", type=int, default=5, help="system calls listed per role")
    ap.add_argument("bench_args", nargs="*")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="sandcell-cpu-split-") as tmp:
        data = os.path.join(tmp, "perf.data")
        cmd = ["perf", "record", "-q", "-a", "-g", "-o", data, "--", a.bench, *a.bench_args,
               "--lang", a.lang, "-n", str(a.n), "--throughput", "0", "--runners", "fresh"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=1800)
        if r.returncode != 0:
            sys.exit(f"perf record or sandcell-bench failed ({r.returncode}): {' '.join(cmd)}")
        script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,period,ip,sym"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                timeout=1800, check=True).stdout

    server = os.path.basename(a.bench)[:15]
    all_samples = list(samples(script))
    zygote_tids = collections.Counter(t for c, t, _, _ in all_samples if c == "sandcell-zygote")
    if not zygote_tids:
        sys.exit("no sample of a sandcell-zygote: did the runs use the fork server?")
    zygote_tid = zygote_tids.most_common(1)[0][0]

    def role(comm, tid):
        if comm == server:
            return "server"
        if comm == "sandcell-zygote":
            return "zygote" if tid == zygote_tid else "child"
        if comm == a.program:
            return "program"
        if comm == "sandcell-keeper":
            return "keeper"
        if comm == "swapper":
            return None  # idle
        if comm.startswith(KERNEL_THREADS):
            return "kernel"
        return "other"

    ns = collections.defaultdict(lambda: [0, 0])
    calls = collections.defaultdict(collections.Counter)
    for comm, tid, period, stack in all_samples:
        r = role(comm, tid)
        if r is None:
            continue
        kernel = r == "kernel" or any(f.startswith(ENTRY) for f in stack)
        ns[r][0 if kernel else 1] += period
        if kernel and r != "kernel":
            calls[r][top_call(stack) or "interrupt"] += period

    runs = a.n + 1
    ms = lambda v: v / 1e6 / runs
    counted = ("server", "zygote", "child", "program", "keeper")
    total = sum(sum(ns[r]) for r in counted)
    print(f"{runs} fresh runs of `{a.lang}` under perf record -a -g; ms per run\n")
    print("| role | kernel | user | total | share of the counted |")
    print("|---|---|---|---|---|")
    for r in counted + ("kernel", "other"):
        k, u = ns[r]
        share = f"{100 * (k + u) / total:.0f}%" if r in counted and total else "not counted"
        print(f"| {r} | {ms(k):.2f} | {ms(u):.2f} | {ms(k + u):.2f} | {share} |")
    k = sum(ns[r][0] for r in counted)
    print(f"| counted (what sandcell-bench's CPU column sums) | {ms(k):.2f} | {ms(total - k):.2f} | "
          f"{ms(total):.2f} | kernel {100 * k / total:.0f}% |")
    print("\nThe system calls of each role's kernel time, ms per run:\n")
    for r in counted:
        top = ", ".join(f"{c} {ms(v):.2f}" for c, v in calls[r].most_common(a.top))
        print(f"- {r}: {top}")


if __name__ == "__main__":
    main()
