package seccomp

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// action is what the filter does with a call that matches a rule.
type action int

const (
	// allow lets the call through.
	allow action = iota
	// deny fails the call with EPERM. That is also the default action, so a
	// deny rule changes nothing in the compiled filter (libcontainer drops
	// rules equal to the default); it is there so the intent is reviewable
	// and tested.
	deny
	// noSys fails the call with ENOSYS, which libc reads as "this kernel is
	// too old" and falls back to an older call.
	noSys
)

// rule is one line of the profile: names that share an action and argument
// checks.
type rule struct {
	names  []string
	action action
	// args must all match (they are AND-ed); rules for the same name are
	// OR-ed. Use at most one check per argument index: libcontainer turns
	// several checks on one index into separate rules, which OR-s them.
	args []specs.LinuxSeccompArg
	// arches lists the GOARCH values the names exist on; nil means every
	// architecture in nativeArch.
	arches []string
	// why names the attack a deny or noSys rule stops. Allow rules carry a
	// comment in rules.go instead.
	why string
}

// nativeArch maps GOARCH to the only architecture the filter accepts.
var nativeArch = map[string]specs.Arch{
	"amd64": specs.ArchX86_64,
	"arm64": specs.ArchAARCH64,
}

// Profile returns the seccomp filter for the native architecture
// (runtime.GOARCH), ready for specs.Linux.Seccomp. Each call returns a new
// value that the caller may modify.
//
// The filter lists only the native architecture: SCMP_ARCH_X86_64 on amd64,
// SCMP_ARCH_AARCH64 on arm64. Calls made through any other syscall ABI (i386
// int $0x80 and x32 on amd64, AArch32 on arm64) are killed, not failed.
// The runtime spec has no field for this, and none is needed. Checked
// against runc v1.5.3:
//
//   - libcontainer/seccomp/seccomp_linux.go:73 builds the filter with
//     libseccomp.NewFilter and only calls AddArch (line 84); nothing in runc
//     calls SetBadArchAction, so libseccomp's default bad-architecture
//     action applies, SCMP_ACT_KILL (seccomp_attr_set(3): "Defaults to the
//     SCMP_ACT_KILL action"), that is SECCOMP_RET_KILL_THREAD.
//   - The -ENOSYS stub that runc prepends (patchbpf/enosys_linux.go:268-269
//     and :529-535) jumps straight into the libseccomp filter for any
//     architecture not in the profile, "Such architectures will probably get
//     the BadArch action of the filter regardless". On amd64 it also skips
//     x32 numbers (bit 30 set, :422-430), and the x86_64 filter that
//     libseccomp (2.5.4) generates sends every number >= 0x40000000 to the
//     bad-architecture action (seen in its exported BPF).
//
// KILL_THREAD ends a single-threaded program with SIGSYS (exit status 159
// under runc); in a multi-threaded program only the calling thread dies. In
// both cases the call never runs. testdata/probes (modes int80 and x32) and
// TestProbeUnderRunc check this.
//
// Flags is left nil, so libcontainer adds SECCOMP_FILTER_FLAG_SPEC_ALLOW
// when the kernel supports it (libcontainer/specconv/spec_linux.go:1209 in
// runc v1.5.3): the filter does not force the Speculative
// Store Bypass mitigation on. That mitigation protects a task from code in
// its own address space; here the attacker is the task itself.
func Profile() (*specs.LinuxSeccomp, error) {
	return profileFor(runtime.GOARCH)
}

// DeniedSyscalls returns the sorted names that the profile for the native
// architecture denies outright with EPERM. Names that are merely absent from
// the allowlist, and clone3 (ENOSYS), are not included.
func DeniedSyscalls() []string {
	var names []string
	for _, r := range rules {
		if r.action == deny && len(r.args) == 0 && r.appliesTo(runtime.GOARCH) {
			names = append(names, r.names...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// profileFor builds the profile for a GOARCH value.
func profileFor(goarch string) (*specs.LinuxSeccomp, error) {
	arch, ok := nativeArch[goarch]
	if !ok {
		return nil, fmt.Errorf("profile for GOARCH %q: %w", goarch, ErrUnsupportedArch)
	}
	p := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: ptr(uint(errnoEPERM)),
		Architectures:   []specs.Arch{arch},
	}
	for _, r := range rules {
		if !r.appliesTo(goarch) {
			continue
		}
		s := specs.LinuxSyscall{
			Names: slices.Clone(r.names),
			Args:  slices.Clone(r.args),
		}
		switch r.action {
		case allow:
			s.Action = specs.ActAllow
		case deny:
			s.Action, s.ErrnoRet = specs.ActErrno, ptr(uint(errnoEPERM))
		case noSys:
			s.Action, s.ErrnoRet = specs.ActErrno, ptr(uint(errnoENOSYS))
		default:
			return nil, fmt.Errorf("seccomp: rule for %v has unknown action %d", r.names, r.action)
		}
		p.Syscalls = append(p.Syscalls, s)
	}
	return p, nil
}

// appliesTo reports whether r belongs in the profile for goarch.
func (r rule) appliesTo(goarch string) bool {
	return r.arches == nil || slices.Contains(r.arches, goarch)
}

func ptr[T any](v T) *T { return &v }
