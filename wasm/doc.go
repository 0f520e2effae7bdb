// Package wasm is sandcell's third isolation level: a program compiled to
// WebAssembly (WASI preview 1) runs in sandcell's own process on wazero,
// a pure-Go runtime, so that it needs nothing of the host kernel (no user
// namespace, cgroup or seccomp) and runs where those are refused (Ubuntu's
// AppArmor restriction, containers, CI runners, hardened kernels).
//
// Invariant: a module reaches only what the runtime hands it. That is
// WASI preview 1 with two preopened directories, the run's /work (also
// mounted at "/", its working directory) and a fresh /tmp, each a host
// directory reached only through an os.Root that follows no link out of
// it and bounded in bytes, entries, file size and open descriptors
// (fs.go); its argv, the request's environment and stdin; stdout and
// stderr through oci.Output's caps and cleaner; real clocks and the
// host's randomness. There are no sockets (none is preopened, and
// preview 1 cannot make one), no processes and no threads. Functions a
// module imports from elsewhere are stubs that trap. The limits hold as
// for a runc run: the wall clock and CPU time (the run's own thread's
// clock) end it through its context (wazero checks it at every loop and
// call; a sleep is interrupted), its linear memory never grows past the
// memory limit (memory.go), and everything a run made is removed when it
// ends, or by Recover after a crash.
//
// What the sandbox does not cover: the host side of the run is this
// process. A bug in wazero's compiler or its WASI functions is a bug in
// sandcell's server (no kernel boundary behind it, unlike runc's and
// gVisor's), and the compiler runs on untrusted modules, so a module of
// /work is capped at 16 MiB. Compiled modules are kept by content hash,
// in memory and in an owner-only directory (Config.CacheDir).
//
// Runtime implements oci.Runtime, so the executor's compile-then-run
// phases are the same for every backend: a compiled language's compiler
// runs in runc (package executor decides), its module here.
package wasm
