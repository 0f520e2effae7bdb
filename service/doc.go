// Package service is sandcell's MCP sandbox: it implements the tools'
// Sandbox, Installer, Images and Kernels interfaces (package mcp) over the
// executor and the sessions' workspaces (internal/workspace). It owns what
// a request needs beyond running it:
//   - sessions: one run or file change at a time per session (its lock),
//     its files as the run's /work, what a run changed, idle expiry, the
//     dependency sets installed for it (kept with the session on disk);
//   - admission: the gate (gate.go) bounds the runs at once and those
//     waiting, and refuses past both with api.BusyError;
//   - kernels: a session's live interpreters (kernel.go, kernels.go) and
//     a cell's result as the model gets it (cellout.go);
//   - the MCP server itself, with sandcell's instructions (NewServer).
//
// It reaches the executor, the layer store and a started kernel only
// through the small interfaces of seam.go (Executor, Store, Kernel): New
// wires *executor.Executor behind them, tests wire fakes, and no sandbox
// runtime (package oci) is imported here.
//
// Invariant:
//   - A session's calls are serialised by its lock: every call that runs
//     in a session (a run, a cell, an install) or changes its files
//     (write, delete, reset, close) holds the lock for its whole length;
//     reads (list, read, describe) take none and see the files as last
//     saved, a save being one swap of the whole tree.
//   - Nothing runs past the gate: a run, an install and a cell each hold
//     a slot of the gate from before their first sandbox starts until
//     they end (runs and installs through executor.Request.Admit, cells
//     and kernel starts through Service.enter); an idle kernel holds none.
//     Past the slots and the queue a call is refused as busy, and one
//     that gives up while queued leaves the queue.
//   - A session's files are never lost on a refused or failed call: a
//     refusal (an error: unknown session, invalid request, busy) runs
//     nothing and changes nothing; a run or cell whose /work the session
//     refuses (quota) or fails to save leaves the session's files as they
//     were before it, and says so in its result. The program's source
//     (execute_code) never replaces a file of the session.
//   - At most KernelOptions.Max kernels live; a kernel that died is
//     replaced on its session's next call, whose result says the state
//     was lost and why; a session's kernels end with the session.
//
// A request's path: mcp tool -> Service.Execute (session lock, the
// session's files and installed sets) -> executor.Execute (admitted by
// the gate before its first sandbox) -> a sandbox runtime.
package service
