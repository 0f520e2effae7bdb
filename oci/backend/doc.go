// Package backend runs package oci's requests on the host: it is the only
// package that imports libcontainer, starts containers, makes cgroups or
// mounts a run's /work. Every backend here is an oci.Runtime; package oci
// (the backend-neutral core: request, spec, verdict, output, the Runtime
// interface) knows none of them.
//
// Invariant: every container is made from the spec oci.BuildSpec gives
// its request (see oci's invariant: namespaces, read-only root, no
// capabilities, no_new_privs, seccomp, limits, an unprivileged uid), and
// only after Request.Validate; its processes stay in its cgroup from
// before the program's first instruction (libcontainer's init, the fork
// server's child placed by the zygote, runsc's holder); it is registered
// with its Libcontainer until Destroy, and after Destroy nothing of it is
// left on the host: no process, cgroup, mount, state or temp file. What a
// killed server left behind, the next start's Recover removes.
//
// The backends are sets of files, named by prefix:
//
//   - libcontainer_linux.go, launch_linux.go: runc's libcontainer in this
//     process (Libcontainer, the default), its containers and their init;
//     network_linux.go its egress bridge (the only backend that offers it).
//   - forkserver_linux.go and package zygote: the fork server, which starts
//     a libcontainer config's init from a C zygote, exactly as runc would.
//   - pool.go, pool_linux.go: warm pools (Pool) of prepared containers;
//     runsc_pool_linux.go the gVisor pool's part.
//   - runsc_linux.go, runsc_hold_linux.go: gVisor (Runsc), runsc as a
//     subprocess with a holder that keeps the sandbox in its cgroup.
//   - kernel_linux.go, kernel_stamp_linux.go, kernel_stream.go:
//     kernels, long-lived sandboxes made by Libcontainer's prepare.
//   - shared by them: run_linux.go (a run's /work, pipes, watchdogs and
//     result), fill_linux.go (the fill helper, InitFill), spawn_linux.go,
//     instance_linux.go, statefs_linux.go, recover_linux.go,
//     seal_linux.go, init_linux.go (Init, the re-exec hooks), logrus_linux.go,
//     trace_linux.go, support_linux.go.
//
// Why one package and not one per backend: the backends share one run
// (run_linux.go, fill_linux.go) and one instance's registry of ids, uids
// and cgroups (Libcontainer, which Runsc uses), and the warm pool serves
// both runc and gVisor (pool_linux.go uses Runsc, runsc_pool_linux.go the
// pool's entries). Packages per backend would form a cycle, or need a
// third package for the run with some forty of today's unexported names
// exported between them; the line that is clean is the one between oci
// and this package.
package backend
