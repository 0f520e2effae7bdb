package backend

import (
	"testing"

	"github.com/sandcell/sandcell/oci"
)

// fakeGateway is a network gateway liveKey sees (it is never attached).
type fakeGateway struct{ oci.NetworkGateway }

// TestLiveKeyNotPooled: a create with a network, an egress policy, a
// workspace to fill or files gets no prepared sandbox (its kind is per
// sandbox), and creates that differ in anything the sandbox is made with
// have different kinds.
func TestLiveKeyNotPooled(t *testing.T) {
	base := oci.Request{Root: "/r", Env: []string{"A=1"}}
	opts := oci.SandboxOptions{DiskBytes: 64 << 20, User: "user", Home: "/home/user"}
	if liveKey(&base, opts) == "" {
		t.Fatal("a plain request is not pooled")
	}
	for name, req := range map[string]oci.Request{
		"network": {Root: "/r", Network: fakeGateway{}},
		"egress":  {Root: "/r", Egress: "allow"},
	} {
		if k := liveKey(&req, opts); k != "" {
			t.Errorf("%s: pooled as %q", name, k)
		}
	}
	o2 := opts
	o2.ID, o2.UpperDir = "x", "/elsewhere"
	if liveKey(&base, opts) != liveKey(&base, o2) {
		t.Error("the id or UpperDir changes the kind")
	}
	other := base
	other.Limits.Pids = 7
	o3 := opts
	o3.DiskBytes *= 2
	if k := liveKey(&base, opts); k == liveKey(&other, opts) || k == liveKey(&base, o3) {
		t.Error("other limits or another disk size share a kind")
	}
}
