package seccomp

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// GVisorProfile returns the filter applied inside a gVisor sandbox (runsc
// --oci-seccomp), where the program's syscalls reach gVisor's user-space
// kernel, never the host's.
//
// It is a denylist: every deny rule of Profile, with the argument checks of
// Profile's allow rules turned into denials (namespace flags of clone,
// AF_ALG, AF_PACKET, AF_VSOCK, raw and netfilter sockets). The allowlist's
// job, keeping the host kernel's attack surface small, is done by gVisor's
// sentry, which implements a fraction of Linux and is itself confined by
// gVisor's own seccomp filter. An allowlist cannot be used inside gVisor:
// gVisor applies the filter by its own syscall table, syscalls it does not
// know (clone3 in the 2022 release) cannot be named, and runsc ignores
// defaultErrnoRet, so clone3 would get EPERM, which glibc does not take as a
// reason to fall back to clone: threads and posix_spawn would fail. Under
// this profile such calls get gVisor's own ENOSYS and libc falls back.
func GVisorProfile() (*specs.LinuxSeccomp, error) {
	return gvisorProfileFor(runtime.GOARCH)
}

// gvisorArgDenials are Profile's argument checks, inverted.
var gvisorArgDenials = func() []rule {
	var rs []rule
	// One rule per flag: a masked compare matches one bit pattern, and
	// rules for one name are OR-ed.
	for _, f := range []uint64{cloneNewNS, cloneNewCgroup, cloneNewUTS, cloneNewIPC, cloneNewUser, cloneNewPID, cloneNewNet} {
		rs = append(rs, rule{names: []string{"clone"}, action: deny, args: []specs.LinuxSeccompArg{maskedEq(0, f, f)},
			why: "A new namespace: see the unshare rule."})
	}
	for _, d := range []uint64{afAlg, afPacket, afVsock} {
		rs = append(rs, rule{names: []string{"socket", "socketpair"}, action: deny, args: []specs.LinuxSeccompArg{eq(0, d)},
			why: "AF_ALG, AF_PACKET and AF_VSOCK: see argDenials."})
	}
	for _, d := range []uint64{afInet, afInet6} {
		for _, t := range []uint64{sockRaw, sockPacket} {
			rs = append(rs, rule{names: []string{"socket"}, action: deny, args: []specs.LinuxSeccompArg{eq(0, d), maskedEq(1, sockTypeMask, t)},
				why: "Raw and packet sockets forge packets: see argDenials."})
		}
	}
	for _, p := range []struct{ domain, proto uint64 }{{afInet, ipprotoICMP}, {afInet6, ipprotoICMPv6}} {
		rs = append(rs, rule{names: []string{"socket"}, action: deny, args: []specs.LinuxSeccompArg{eq(0, p.domain), eq(2, p.proto)},
			why: "ICMP sockets are not needed (gVisor's netstack implements ping sockets)."})
	}
	rs = append(rs, rule{names: []string{"socket"}, action: deny,
		args: []specs.LinuxSeccompArg{eq(0, afNetlink), {Index: 2, Value: netlinkRoute, Op: specs.OpNotEqual}},
		why:  "Netlink other than route (nf_tables): see argDenials."})
	// The host kernel refuses device nodes to a user namespace (no
	// CAP_MKNOD), and mounts the writable tmpfs nodev; gVisor's tmpfs
	// checks neither, so a program made a node of any device gVisor
	// emulates (c 10 200, tun) where /dev no longer shows it, and opened
	// it (issue #17). FIFOs and sockets stay allowed, as under runc.
	for _, typ := range []uint64{sIFCHR, sIFBLK} {
		rs = append(rs,
			rule{names: []string{"mknod"}, action: deny, args: []specs.LinuxSeccompArg{maskedEq(1, sIFMT, typ)}, arches: amd64Only,
				why: "Character and block device nodes: the host kernel refuses them to the sandbox, gVisor's tmpfs does not."},
			rule{names: []string{"mknodat"}, action: deny, args: []specs.LinuxSeccompArg{maskedEq(2, sIFMT, typ)},
				why: "Character and block device nodes: the host kernel refuses them to the sandbox, gVisor's tmpfs does not."})
	}
	return rs
}()

func gvisorProfileFor(goarch string) (*specs.LinuxSeccomp, error) {
	arch, ok := nativeArch[goarch]
	if !ok {
		return nil, fmt.Errorf("gVisor profile for GOARCH %q: %w", goarch, ErrUnsupportedArch)
	}
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: []specs.Arch{arch}}
	for _, r := range append(slices.Clone(rules), gvisorArgDenials...) {
		if r.action != deny || !r.appliesTo(goarch) {
			continue
		}
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Names: slices.Clone(r.names), Args: slices.Clone(r.args),
			Action: specs.ActErrno, ErrnoRet: ptr(uint(errnoEPERM)),
		})
	}
	return p, nil
}
