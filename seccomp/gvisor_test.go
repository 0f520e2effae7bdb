package seccomp

import (
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// TestGVisorProfileKeepsEveryDenial: the gVisor denylist denies every name
// the main profile denies, and only denies.
func TestGVisorProfileKeepsEveryDenial(t *testing.T) {
	g, err := gvisorProfileFor("amd64")
	if err != nil {
		t.Fatal(err)
	}
	if g.DefaultAction != specs.ActAllow {
		t.Fatalf("default action %s, want allow (a denylist)", g.DefaultAction)
	}
	denied := map[string]bool{}
	for _, s := range g.Syscalls {
		if s.Action != specs.ActErrno || s.ErrnoRet == nil || *s.ErrnoRet != errnoEPERM {
			t.Errorf("rule %v: action %s, want EPERM", s.Names, s.Action)
		}
		if len(s.Args) == 0 {
			for _, n := range s.Names {
				denied[n] = true
			}
		}
	}
	for _, r := range rules {
		if r.action == deny && len(r.args) == 0 && r.appliesTo("amd64") {
			for _, n := range r.names {
				if !denied[n] {
					t.Errorf("%s is denied by Profile but not by GVisorProfile", n)
				}
			}
		}
	}
}

// TestGVisorProfileArgDenials runs Profile's documented argument denials
// through the gVisor profile with the same model of libseccomp matching
// that TestArgChecks uses for Profile.
func TestGVisorProfileArgDenials(t *testing.T) {
	g, err := gvisorProfileFor("amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range argDenials {
		if d.name == "socket" && d.args[0] == afInet && (d.args[2] == 262 || d.args[2] == 132) {
			continue // MPTCP, SCTP: gVisor does not implement them
		}
		if d.name == "socketpair" {
			continue // gVisor refuses socketpair outside AF_UNIX itself
		}
		if !deniedBy(t, g, d.name, d.args) {
			t.Errorf("%s%v: allowed by the gVisor profile; Profile denies it because: %s", d.name, d.args, d.why)
		}
	}
	for _, ok := range []struct {
		name string
		args [6]uint64
	}{
		{"socket", [6]uint64{afInet, sockStream, 0}},
		{"socket", [6]uint64{afUnix, sockDgram, 0}},
		{"socket", [6]uint64{afNetlink, sockRaw, netlinkRoute}},
		{"clone", [6]uint64{0x3d0f00}}, // pthread_create's flags
	} {
		if deniedBy(t, g, ok.name, ok.args) {
			t.Errorf("%s%v: denied by the gVisor profile, want allowed", ok.name, ok.args)
		}
	}
}

// deniedBy runs a call through p with the model of libseccomp matching
// that TestArgChecks uses.
func deniedBy(t *testing.T, p *specs.LinuxSeccomp, name string, args [6]uint64) bool {
	t.Helper()
	return evaluate(t, p, name, args) == verdict{action: specs.ActErrno, errno: errnoEPERM}
}

// TestGVisorProfileDeviceNodes (issue #17): gVisor's tmpfs lets the
// sandbox user make device nodes (it checks neither CAP_MKNOD nor nodev),
// so the filter denies mknod and mknodat of character and block devices,
// and only those: FIFOs, sockets and regular files stay allowed.
func TestGVisorProfileDeviceNodes(t *testing.T) {
	g, err := gvisorProfileFor("amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode   uint64
		denied bool
	}{
		{sIFCHR | 0o644, true},
		{sIFBLK | 0o600, true},
		{0o010000 | 0o644, false}, // S_IFIFO
		{0o140000 | 0o755, false}, // S_IFSOCK
		{0o100000 | 0o644, false}, // S_IFREG
	} {
		if got := deniedBy(t, g, "mknodat", [6]uint64{0xffffff9c, 0, tc.mode, 0}); got != tc.denied {
			t.Errorf("mknodat mode %#o: denied %v, want %v", tc.mode, got, tc.denied)
		}
		if got := deniedBy(t, g, "mknod", [6]uint64{0, tc.mode, 0}); got != tc.denied {
			t.Errorf("mknod mode %#o: denied %v, want %v", tc.mode, got, tc.denied)
		}
	}
}
