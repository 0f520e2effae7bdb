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
