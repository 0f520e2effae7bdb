// Package oci builds the runtime-spec of one sandbox run and runs it. It is
// the only package that imports libcontainer.
//
// Invariant: every run gets a fresh container with all seven namespaces
// (user, mount, pid, ipc, uts, net with loopback only, cgroup), a read-only
// root, no capabilities, no_new_privs, a seccomp filter, its limits, and an
// unprivileged uid inside that maps to an unprivileged host range; nothing
// of the host's filesystem but the run's own /work is mounted. After Destroy
// nothing of the run remains on the host.
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
package oci
