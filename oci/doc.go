// Package oci is the backend-neutral core of a sandbox run: what to run
// (Request, Workspace, Mount), the runtime-spec it gets (Spec, Host), the
// Runtime and Container every backend implements, the output caps (Output,
// Capture, CleanText), the verdict (Verdict, ExitVerdict, StopReason), the
// kernel protocol's types (KernelCell, KernelVerdict) and how /work is
// filled and read back (FillWork, Collect). It runs nothing itself and
// imports no container runtime: the backends are package oci/backend
// (libcontainer in-process, the fork server and its zygote, warm pools,
// runsc, kernels) and package wasm (wazero), and each of them turns a
// Request into a run through this package, so that a request means the
// same, and gets the same verdict in the same words, whatever runs it.
//
// Invariant: the spec of a run (Spec) gives it all seven namespaces (user,
// mount, pid, ipc, uts, cgroup, and net with loopback only); a read-only
// root; no capabilities in any set; no_new_privs; a seccomp filter (a Host
// without one is refused); its limits (cgroup limits, or rlimits where a
// rootless server has no cgroup: Enforced says which held); and a user
// that maps to an unprivileged host uid (SandboxUID inside, in a range of
// its own; a rootless server's single id maps to the server's own uid). Of
// the host's filesystem it sees only its root (a read-only layer), its own
// /work and what the Request names: read-only bind mounts in /tmp (dependency layers, a kernel's driver at KernelDir;
// writable only for an install's output, Mount.Writable). Its only way
// out of the sandbox's network is, if the Request sets Egress, one
// listener on loopback (EgressAddr) that forwards to the host's
// allowlisting proxy. A Request is validated once (Validate) and every
// backend's Prepare refuses an invalid one with ErrInvalidRequest.
//
// The threat is the program itself: code an AI agent wrote, possibly
// hostile. See SECURITY.md for the threat model.
//
// A run has four steps, so that a pool can do the first ahead of time:
//
//	c, err := rt.Prepare(ctx, req) // container created, init waiting
//	err = c.Start(ctx)              // the program runs
//	res := c.Wait(ctx)              // verdict, output, usage
//	c.Destroy()                     // nothing left
//
// Run does all four.
//
// Why a package of its own: measured before the split (go/types, a file
// using another file's declarations is an arrow), oci's 35 non-test files
// had 100 arrows among them. The backend-neutral files used no backend
// declaration but two: two Request fields that carried libcontainer's
// internals (the direct start and a kernel's pipes, now the backend's own
// prepareAs) and the /work fill (now FillWork, here). With those moved the
// core is 13 files with 14 arrows among them and none to a backend, which
// the compiler now enforces; the backends' 23 files have 46 arrows among
// them and 42 down to this package, none back up.
package oci
