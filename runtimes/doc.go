// Package runtimes builds the sandbox runtimes of one sandcell instance
// from plain values: the libcontainer backend (with its fork server), its
// cgroup parent, the warm pools, the gVisor backend (made on first use)
// and the wasm runtime (made on first use), and cleans what dead
// instances left at start-up. It is an assembler: package executor takes
// what it builds through executor.Runtimes and never names a concrete
// backend; cmd/internal/config calls Open.
//
// Invariant: a Set hands out only runtimes it made, and Close destroys
// every container any of them still holds (warm pools included). On a
// host without a kernel sandbox (Config.NoKernelSandbox) it makes the
// wasm runtime alone, and asks for runc or gVisor are errors.
package runtimes
