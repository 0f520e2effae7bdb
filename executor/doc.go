// Package executor runs one request: it resolves the language once, merges
// the language's phase limits into the request's, picks the runtime (runc,
// a warm pool of it, gVisor, or package wasm's: a module in this process)
// and runs the compile and run phases, each in a fresh sandbox of an
// oci.Runtime. Every caller runs programs through
// it: `sandcell run`, batch, the benchmark harness and the MCP tools (by
// way of package service).
//
// Invariant: a request either is refused, with an error in class
// api.ErrInvalid (the caller can fix it) or api.ErrBusy, and nothing ran;
// or it ran, and Execute returns its result with a nil error, whatever the
// verdict (internal_error included: sandcell failed and the result's
// message says how).
//
// Where things are decided:
//   - a run's limits: limits.go (server defaults, raised by the language's
//     adjustments, then the request, clamped to the ceilings);
//   - which sandbox backend: runtime.go;
//   - the compile-then-run pipeline: execute.go;
//   - dependency layers (pip, npm in an egress sandbox): deps.go.
//
// Admission (how many runs at once) is the caller's: Request.Admit is
// called once, before the first sandbox of the request starts.
package executor
