// Package bench measures sandcell against its references, side by side in
// one run: the latency of a program end to end through each runner (the
// bare host, bubblewrap, the runc and runsc CLIs on sandcell's own bundle,
// sandcell fresh, pooled and under gVisor), the throughput of the bare host
// and sandcell at 1, 2 and 4 runs in flight (Run, into a Report: the
// Markdown block of BENCHMARKS.md and a box plot), and the throughput of
// the HumanEval-X programs through the executor and on the bare host
// (CompareHumanEval). cmd/sandcell-bench is its command line.
//
// Invariant: every runner runs the same program the same way: the same
// layer root, the same files in /work, the same argv per phase with
// sandcell's own environment (oci.Spec's) and limits. There is one bare
// host baseline (bare.go), which both measurements use, and one worker
// pool (internal/par). Numbers are only ever compared within one run:
// the runners are interleaved so that a slow spell of a shared host falls
// on all of them.
//
// Preconditions: root (the bare host chroots, mounts and makes device
// nodes; the executor needs root anyway).
package bench
