// Package seccomp holds the one seccomp filter applied to every sandbox run,
// as data a reviewer can read: an allowlist of system calls, a few argument
// checks, and an explicit list of denials, each naming the attack it stops.
//
// # Threat model
//
// The attacker is the untrusted program inside the container. It may be any
// native code (a static binary, hand-written assembly), runs as root of its
// own user namespace (an unprivileged uid on the host) with no capabilities
// and no_new_privs, and has its own PID, network, mount, IPC and UTS
// namespaces. Its goal is to reach the host: by exploiting a kernel bug, by
// touching host-wide state, or by reading or writing other processes.
//
// The filter defends by shrinking the kernel reachable from that program:
//
//   - Kernel subsystems with a record of privilege-escalation bugs are cut
//     off: io_uring, bpf, perf events, keyrings, userfaultfd, and the
//     namespaced mount code that unshare(CLONE_NEWUSER) would unlock.
//   - Host-wide operations are denied even though missing capabilities
//     should already stop them: time, modules, kexec, reboot, swap, acct,
//     hostname, quotas.
//   - Cross-process access is denied: ptrace, process_vm_readv/writev,
//     pidfd_getfd, kcmp.
//   - Only the native syscall ABI is accepted. A 32-bit int $0x80 or an x32
//     call on amd64 (or AArch32 on arm64) kills the calling thread; see
//     [Profile] for how libcontainer gets there.
//   - socket(2) is limited to AF_UNIX, TCP and UDP over IPv4 and IPv6, and
//     route netlink. AF_ALG, AF_PACKET, AF_VSOCK, raw, packet, ping, SCTP,
//     MPTCP and other netlink sockets are refused.
//
// Everything not allowed fails with EPERM, except clone3(2), which fails
// with ENOSYS so that libc falls back to clone(2), whose flags the filter can
// inspect (clone3 passes them in memory, which seccomp cannot read).
//
// The filter does not defend against:
//
//   - bugs in allowed system calls (read, mmap, futex, the TCP/IP stack, the
//     filesystems the sandbox can reach);
//   - anything an argument check cannot see: pointers and the memory they
//     point to. ioctl(2) is allowed whole, so the sandbox must never be given
//     a terminal (TIOCSTI, TIOCLINUX);
//   - side channels (Spectre-class, cache timing, page-cache residency via
//     mincore and cachestat);
//   - resource exhaustion, which cgroups and rlimits bound, and network
//     egress, which the network namespace bounds.
//
// # Behaviour depends on libseccomp
//
// libcontainer resolves syscall names with the libseccomp it links. Names
// that library does not know are skipped, and libcontainer returns ENOSYS for
// any syscall number above the highest one the profile resolves (its
// "-ENOSYS stub", libcontainer/seccomp/patchbpf in runc). With libseccomp
// 2.5.4 (Debian 12) this means that new syscalls such as mseal, statmount
// and listmount get ENOSYS even though they are on the allowlist, and libc
// falls back to older calls.
//
// # Changing the profile
//
// Edit the table in rules.go, run "go test ./seccomp -update" to rewrite
// testdata/profile.json, and review the JSON diff. A new denial needs a Why
// that names the attack (and the CVE, when there is one), and a probe in
// testdata/probes/syscalls.c that the root test runs under runc.
package seccomp
