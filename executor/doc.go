// Package executor runs one request: a program (Execute: a compile phase
// if its language has one, then the run phase, each in a fresh sandbox),
// a kernel (StartKernel: a session's live interpreter) or a dependency
// install (Install). Every caller runs programs through it: `sandcell
// run`, batch, the benchmark harness, the REST APIs and the MCP tools (by
// way of package service).
//
// A request is planned once (plan.go): its language (the wasm variant
// under isolation wasm, or an imported image's own program), isolation,
// roots, dependency layer, environment, mounts, argv and limits are
// decided there and nowhere else, before any sandbox starts; Execute and
// StartKernel run the plan. The environment has one rule (planEnv): the
// image's, then the language's, then the kernel driver's, then the
// dependency layer's, then the request's own, which wins.
//
// The executor names no concrete backend: it takes its runtimes
// (Options.Runtimes, built by package runtimes) and its layer store
// (Options.Store) as interfaces, and chooses a runtime by isolation name.
//
// Invariant: a request either is refused, with an error in class
// api.ErrInvalid (the caller can fix it) or api.ErrBusy, or a failure of
// its preparation (a layer build, an install), and no program of it ran;
// or it ran, and Execute returns its result with a nil error, whatever the
// verdict (internal_error included: sandcell failed and the result's
// message says how). Everything that can refuse a request without
// touching the host (language, isolation, sizes, limits) is decided
// before any layer is built, any image mounted or any admission asked.
//
// Where things are decided:
//   - the plan of a request: plan.go;
//   - a run's limits: limits.go (server defaults, raised by the language's
//     adjustments, then the request, clamped to the ceilings);
//   - which sandbox backend: plan.go (isolation, runtime), by name from
//     Options.Runtimes;
//   - the compile-then-run pipeline and its result: execute.go;
//   - dependency layers (pip, npm in an egress sandbox): deps.go;
//   - isolation wasm's variant and roots: wasm.go; images: image.go;
//     kernels: kernel.go.
//
// Admission (how many runs at once) is the caller's: Request.Admit is
// called once, before the first sandbox of the request starts, and
// released when the request is done.
package executor
