package seccomp

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

var update = flag.Bool("update", false, "rewrite testdata/profile.json from Profile")

const goldenPath = "testdata/profile.json"

// TestGolden keeps the amd64 profile reviewable as JSON: any change to the
// table shows up as a diff of testdata/profile.json.
func TestGolden(t *testing.T) {
	p, err := profileFor("amd64")
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(p, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(filepath.FromSlash(goldenPath), got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(filepath.FromSlash(goldenPath))
	if err != nil {
		t.Fatalf("%v (run go test ./seccomp -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("profileFor(amd64) differs from %s at %s; run go test ./seccomp -update and review the diff",
			goldenPath, firstDiff(got, want))
	}
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, strings.TrimSpace(gl), strings.TrimSpace(wl))
		}
	}
	return "end of file"
}

// requiredDenials must be refused with EPERM by an explicit deny rule, with
// a reason, on every architecture where the syscall exists.
var requiredDenials = []struct {
	name   string
	arches []string // nil: amd64 and arm64
}{
	// Cross-process access and exploit helpers.
	{name: "ptrace"}, {name: "process_vm_readv"}, {name: "process_vm_writev"},
	{name: "kcmp"}, {name: "pidfd_getfd"}, {name: "personality"},
	{name: "userfaultfd"},
	// Risky kernel subsystems.
	{name: "io_uring_setup"}, {name: "io_uring_enter"}, {name: "io_uring_register"},
	{name: "bpf"}, {name: "perf_event_open"},
	{name: "keyctl"}, {name: "add_key"}, {name: "request_key"},
	// Mounts and namespaces.
	{name: "mount"}, {name: "umount2"}, {name: "pivot_root"}, {name: "unshare"},
	{name: "setns"}, {name: "fsopen"}, {name: "fsconfig"}, {name: "fsmount"},
	{name: "fspick"}, {name: "move_mount"}, {name: "open_tree"},
	{name: "mount_setattr"}, {name: "chroot"},
	// Kernel code.
	{name: "init_module"}, {name: "finit_module"}, {name: "delete_module"},
	{name: "kexec_load"}, {name: "kexec_file_load"},
	{name: "create_module", arches: amd64Only}, {name: "get_kernel_syms", arches: amd64Only},
	{name: "query_module", arches: amd64Only},
	// Host time.
	{name: "clock_settime"}, {name: "clock_adjtime"}, {name: "settimeofday"},
	{name: "adjtimex"},
	// Host administration.
	{name: "acct"}, {name: "swapon"}, {name: "swapoff"}, {name: "reboot"},
	{name: "syslog"}, {name: "quotactl"}, {name: "quotactl_fd"},
	{name: "lookup_dcookie"}, {name: "nfsservctl"}, {name: "sethostname"},
	{name: "setdomainname"}, {name: "vhangup"}, {name: "fanotify_init"},
	{name: "_sysctl", arches: amd64Only}, {name: "uselib", arches: amd64Only},
	// File handles ("shocker").
	{name: "name_to_handle_at"}, {name: "open_by_handle_at"},
	// x86 hardware access.
	{name: "iopl", arches: amd64Only}, {name: "ioperm", arches: amd64Only},
	{name: "modify_ldt", arches: amd64Only},
	// NUMA policy.
	{name: "mbind"}, {name: "migrate_pages"}, {name: "move_pages"},
	{name: "set_mempolicy"}, {name: "set_mempolicy_home_node"},
}

func supportedArches() []string {
	var a []string
	for k := range nativeArch {
		a = append(a, k)
	}
	slices.Sort(a)
	return a
}

func mustProfile(t *testing.T, goarch string) *specs.LinuxSeccomp {
	t.Helper()
	p, err := profileFor(goarch)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRequiredDenials(t *testing.T) {
	for _, goarch := range supportedArches() {
		p := mustProfile(t, goarch)
		for _, d := range requiredDenials {
			if d.arches != nil && !slices.Contains(d.arches, goarch) {
				continue
			}
			t.Run(goarch+"/"+d.name, func(t *testing.T) {
				var denied bool
				for _, s := range p.Syscalls {
					if !slices.Contains(s.Names, d.name) {
						continue
					}
					if s.Action != specs.ActErrno {
						t.Errorf("%s: rule with action %s, want only %s", d.name, s.Action, specs.ActErrno)
						continue
					}
					if s.ErrnoRet == nil || *s.ErrnoRet != errnoEPERM || len(s.Args) != 0 {
						t.Errorf("%s: rule %+v, want unconditional errno EPERM", d.name, s)
						continue
					}
					denied = true
				}
				if !denied {
					t.Errorf("%s: no deny rule", d.name)
				}
				for _, r := range rules {
					if slices.Contains(r.names, d.name) && r.appliesTo(goarch) && strings.TrimSpace(r.why) == "" {
						t.Errorf("%s: deny rule has no Why", d.name)
					}
				}
			})
		}
	}
}

// TestRuleShape checks the table for mistakes that would compile into a
// different filter than the one it reads as.
func TestRuleShape(t *testing.T) {
	for i, r := range rules {
		t.Run(fmt.Sprintf("rule%d_%s", i, r.names[0]), func(t *testing.T) {
			if len(r.names) == 0 {
				t.Fatal("rule without names")
			}
			if r.action != allow && strings.TrimSpace(r.why) == "" {
				t.Errorf("%v: a deny or noSys rule needs a Why naming the attack", r.names)
			}
			if r.action == allow && r.why != "" {
				t.Errorf("%v: allow rules carry a comment, not a Why", r.names)
			}
			if r.action != allow && len(r.args) != 0 {
				t.Errorf("%v: deny rules must be unconditional; express exceptions as allow rules", r.names)
			}
			if len(r.args) == 0 && !slices.IsSorted(r.names) {
				t.Errorf("%v: names are not sorted", r.names)
			}
			seen := map[uint]bool{}
			for _, a := range r.args {
				if seen[a.Index] {
					t.Errorf("%v: two checks on argument %d; libcontainer would OR them", r.names, a.Index)
				}
				seen[a.Index] = true
				if a.Index > 5 {
					t.Errorf("%v: argument index %d out of range", r.names, a.Index)
				}
			}
			for _, a := range r.arches {
				if _, ok := nativeArch[a]; !ok {
					t.Errorf("%v: unknown arch %q", r.names, a)
				}
			}
		})
	}
}

// TestNoConflicts checks that every name has exactly one kind of rule, so
// libseccomp never has to choose between an allow and a deny for a call.
func TestNoConflicts(t *testing.T) {
	for _, goarch := range supportedArches() {
		t.Run(goarch, func(t *testing.T) {
			kind := map[string]string{}
			unconditional := map[string]int{}
			for _, s := range mustProfile(t, goarch).Syscalls {
				k := string(s.Action)
				if s.ErrnoRet != nil {
					k += fmt.Sprintf("(%d)", *s.ErrnoRet)
				}
				for _, n := range s.Names {
					if prev, ok := kind[n]; ok && prev != k {
						t.Errorf("%s is both %s and %s", n, prev, k)
					}
					kind[n] = k
					if len(s.Args) == 0 {
						unconditional[n]++
					}
				}
			}
			for n, c := range unconditional {
				if c > 1 {
					t.Errorf("%s is listed unconditionally %d times", n, c)
				}
			}
		})
	}
}

func TestArchitectures(t *testing.T) {
	for _, goarch := range supportedArches() {
		t.Run(goarch, func(t *testing.T) {
			p := mustProfile(t, goarch)
			if want := []specs.Arch{nativeArch[goarch]}; !slices.Equal(p.Architectures, want) {
				t.Errorf("Architectures = %v, want %v", p.Architectures, want)
			}
			if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != errnoEPERM {
				t.Errorf("default = %s/%v, want %s with errno %d", p.DefaultAction, p.DefaultErrnoRet, specs.ActErrno, errnoEPERM)
			}
			if p.Flags != nil {
				t.Errorf("Flags = %v, want nil (see Profile)", p.Flags)
			}
		})
	}
}

func TestUnsupportedArch(t *testing.T) {
	for _, goarch := range []string{"386", "arm", "riscv64", "s390x", ""} {
		if _, err := profileFor(goarch); !errors.Is(err, ErrUnsupportedArch) {
			t.Errorf("profileFor(%q) error = %v, want ErrUnsupportedArch", goarch, err)
		}
	}
}

func TestProfileNative(t *testing.T) {
	p, err := Profile()
	if _, ok := nativeArch[runtime.GOARCH]; !ok {
		if !errors.Is(err, ErrUnsupportedArch) {
			t.Fatalf("Profile() on %s: error = %v, want ErrUnsupportedArch", runtime.GOARCH, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// Callers may modify the result; that must not leak into the next call.
	p.Syscalls[0].Names[0] = "changed"
	p.Syscalls = nil
	q, err := Profile()
	if err != nil {
		t.Fatal(err)
	}
	if q.Syscalls[0].Names[0] == "changed" {
		t.Error("Profile() returned shared state: a caller's change leaked into the next call")
	}
}

func TestDeniedSyscalls(t *testing.T) {
	got := DeniedSyscalls()
	if !slices.IsSorted(got) {
		t.Errorf("DeniedSyscalls() is not sorted: %v", got)
	}
	if len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("DeniedSyscalls() has duplicates: %v", got)
	}
	if _, ok := nativeArch[runtime.GOARCH]; !ok {
		return
	}
	for _, d := range requiredDenials {
		if d.arches != nil && !slices.Contains(d.arches, runtime.GOARCH) {
			continue
		}
		if _, found := slices.BinarySearch(got, d.name); !found {
			t.Errorf("DeniedSyscalls() lacks %s", d.name)
		}
	}
	for _, n := range []string{"clone", "clone3", "socket", "read"} {
		if slices.Contains(got, n) {
			t.Errorf("DeniedSyscalls() contains %s, which is not denied outright", n)
		}
	}
}

// verdict is what the filter does with one call: an action and, for
// SCMP_ACT_ERRNO, the errno.
type verdict struct {
	action specs.LinuxSeccompAction
	errno  uint
}

func (v verdict) String() string {
	if v.action == specs.ActErrno {
		return fmt.Sprintf("%s(%d)", v.action, v.errno)
	}
	return string(v.action)
}

// evaluate applies p to a call the way libseccomp does: a rule matches when
// all its argument checks hold (64-bit compares), rules are OR-ed, and an
// unmatched call gets the default action.
func evaluate(t *testing.T, p *specs.LinuxSeccomp, name string, args [6]uint64) verdict {
	t.Helper()
	var matched []verdict
	for _, s := range p.Syscalls {
		if !slices.Contains(s.Names, name) {
			continue
		}
		ok := true
		for _, a := range s.Args {
			v := args[a.Index]
			switch a.Op {
			case specs.OpEqualTo:
				ok = ok && v == a.Value
			case specs.OpNotEqual:
				ok = ok && v != a.Value
			case specs.OpMaskedEqual:
				ok = ok && v&a.Value == a.ValueTwo
			default:
				t.Fatalf("evaluate: operator %s is not modelled", a.Op)
			}
		}
		if ok {
			v := verdict{action: s.Action}
			if s.ErrnoRet != nil {
				v.errno = *s.ErrnoRet
			}
			matched = append(matched, v)
		}
	}
	// Several rules may match with one verdict (the gVisor denylist's
	// raw-socket and ICMP rules both deny a raw ICMP socket).
	matched = slices.Compact(matched)
	if len(matched) > 1 {
		t.Fatalf("evaluate(%s, %v): conflicting rules %v", name, args, matched)
	}
	if len(matched) == 1 {
		return matched[0]
	}
	def := verdict{action: p.DefaultAction}
	if p.DefaultErrnoRet != nil {
		def.errno = *p.DefaultErrnoRet
	}
	return def
}

// TestArgChecks runs calls through the argument checks: what must stay
// allowed, and every case in argDenials.
func TestArgChecks(t *testing.T) {
	var (
		allowed = verdict{action: specs.ActAllow}
		eperm   = verdict{action: specs.ActErrno, errno: errnoEPERM}
		enosys  = verdict{action: specs.ActErrno, errno: errnoENOSYS}
	)
	const (
		sockNonblock = 0x800
		sockCloexec  = 0x80000
		sockRaw      = 3
		sigchld      = 17
		// glibc's pthread_create flags.
		threadFlags = 0x3d0f00
		// posix_spawn: CLONE_VM|CLONE_VFORK.
		vforkFlags = 0x4100
	)
	tests := []struct {
		desc string
		name string
		args [6]uint64
		want verdict
	}{
		{"unix stream", "socket", [6]uint64{afUnix, sockStream, 0}, allowed},
		{"unix dgram cloexec", "socket", [6]uint64{afUnix, sockDgram | sockCloexec, 0}, allowed},
		{"unix seqpacket", "socket", [6]uint64{afUnix, 5, 0}, allowed},
		{"inet stream", "socket", [6]uint64{afInet, sockStream, 0}, allowed},
		{"inet stream nonblock cloexec", "socket", [6]uint64{afInet, sockStream | sockNonblock | sockCloexec, 0}, allowed},
		{"inet tcp", "socket", [6]uint64{afInet, sockStream, ipprotoTCP}, allowed},
		{"inet udp", "socket", [6]uint64{afInet, sockDgram, ipprotoUDP}, allowed},
		{"inet6 dgram", "socket", [6]uint64{afInet6, sockDgram | sockNonblock, 0}, allowed},
		{"inet6 tcp", "socket", [6]uint64{afInet6, sockStream | sockCloexec, ipprotoTCP}, allowed},
		{"netlink route", "socket", [6]uint64{afNetlink, sockRaw | sockCloexec, netlinkRoute}, allowed},
		{"netlink route dgram", "socket", [6]uint64{afNetlink, sockDgram, netlinkRoute}, allowed},
		{"socketpair unix", "socketpair", [6]uint64{afUnix, sockStream, 0}, allowed},
		{"inet udp on tcp", "socket", [6]uint64{afInet, sockStream, ipprotoUDP}, eperm},
		{"domain in high bits", "socket", [6]uint64{1<<32 | afUnix, sockStream, 0}, eperm},
		{"fork", "clone", [6]uint64{sigchld}, allowed},
		{"thread", "clone", [6]uint64{threadFlags}, allowed},
		{"vfork", "clone", [6]uint64{vforkFlags | sigchld}, allowed},
		{"clone3", "clone3", [6]uint64{}, enosys},
		{"not listed", "sandcell_no_such_call", [6]uint64{}, eperm},
	}
	for _, d := range argDenials {
		tests = append(tests, struct {
			desc string
			name string
			args [6]uint64
			want verdict
		}{"denied " + d.why, d.name, d.args, eperm})
	}
	for _, goarch := range supportedArches() {
		p := mustProfile(t, goarch)
		for _, tt := range tests {
			if got := evaluate(t, p, tt.name, tt.args); got != tt.want {
				t.Errorf("%s: %s(%#x) = %v, want %v (%s)", goarch, tt.name, tt.args[:3], got, tt.want, tt.desc)
			}
		}
	}
	for _, d := range argDenials {
		if strings.TrimSpace(d.why) == "" {
			t.Errorf("argDenials %s(%#x): empty why", d.name, d.args[:3])
		}
	}
}
