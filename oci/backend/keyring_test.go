package backend

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/seccomp"
)

// TestDeniesKeyrings: a container gets no session keyring of its own only
// when its filter refuses every keyring syscall whatever the arguments.
func TestDeniesKeyrings(t *testing.T) {
	ours, err := seccomp.Profile()
	if err != nil {
		t.Fatal(err)
	}
	deny := func(names ...string) specs.LinuxSyscall {
		return specs.LinuxSyscall{Names: names, Action: specs.ActErrno}
	}
	all := deny("add_key", "keyctl", "request_key")
	withArgs := all
	withArgs.Args = []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpEqualTo}}
	for _, c := range []struct {
		name   string
		filter *specs.LinuxSeccomp
		want   bool
	}{
		{"sandcell's profile", ours, true},
		{"no filter", nil, false},
		{"allow by default, all three denied", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{all}}, true},
		{"keyctl left out", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{deny("add_key", "request_key")}}, false},
		{"denied only for some arguments", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{withArgs}}, false},
		{"also allowed by a rule", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{all, {Names: []string{"keyctl"}, Action: specs.ActAllow}}}, false},
		{"an allowlist that names none", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}, true},
	} {
		if got := deniesKeyrings(c.filter); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
