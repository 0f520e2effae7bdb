package runtimes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
)

// TestWasmOnly: on a host without a kernel sandbox the set is the wasm
// runtime alone, needing no privilege, and says why runc and gVisor are
// not there.
func TestWasmOnly(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	s, err := Open(Config{StateDir: state, NoKernelSandbox: "user namespaces are off", Isolation: "wasm"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rt, err := s.Runtime("wasm", false, false); err != nil || rt == nil {
		t.Errorf("wasm: %v %v", rt, err)
	}
	for _, iso := range []string{"runc", "gvisor", "qemu"} {
		if _, err := s.Runtime(iso, false, false); err == nil {
			t.Errorf("%s offered without a kernel sandbox", iso)
		}
	}
	if _, err := s.Gvisor(); err == nil || !strings.Contains(err.Error(), "user namespaces are off") {
		t.Errorf("Gvisor: %v, want the reason", err)
	}
	if _, err := s.StartSandbox(context.Background(), &oci.Request{}, oci.SandboxOptions{}); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "user namespaces are off") {
		t.Errorf("StartSandbox without a kernel sandbox: %v, want an invalid request that says why", err)
	}
	if uid, gid := s.SandboxIDs(); uid != uint32(os.Getuid()) || gid != uint32(os.Getgid()) {
		t.Errorf("SandboxIDs %d:%d, want this process's", uid, gid)
	}
	if s.Tier() != limits.TierNone || s.Live() != 0 || s.Libcontainer() != nil || s.Pool() != nil {
		t.Errorf("tier %v live %d", s.Tier(), s.Live())
	}
	if st, idle := s.PoolStats(); idle != 0 || st.Hits != 0 {
		t.Errorf("pool stats %+v %d", st, idle)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v %v, want this user's alone", fi, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestStartSandboxRuncOnly: a server whose isolation is not runc refuses
// live sandboxes instead of running them under a weaker isolation.
func TestStartSandboxRuncOnly(t *testing.T) {
	for _, iso := range []string{"gvisor", "wasm"} {
		s := &Set{cfg: Config{Isolation: iso}, rt: &backend.Libcontainer{}}
		if _, err := s.StartSandbox(context.Background(), &oci.Request{}, oci.SandboxOptions{}); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), iso) {
			t.Errorf("isolation %s: %v, want an invalid request naming it", iso, err)
		}
	}
}
