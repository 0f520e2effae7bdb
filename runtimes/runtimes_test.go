package runtimes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rootfs"
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

// TestLivePoolServes: a server with a warm pool serves a live sandbox of
// a kind asked for before from its pool of live sandboxes, and Close
// leaves nothing of the pool.
func TestLivePoolServes(t *testing.T) {
	state, cg := testutil.StateDir(t, "sandcell-runtimes-test-")
	dir := filepath.Join(t.TempDir(), "pool")
	s, err := Open(Config{HostSettings: HostSettings{CgroupParent: cg, MaxPids: 4096, PoolSize: 1, UIDBase: 100000}, StateDir: state,
		Isolation: "runc", LivePoolDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("the live pool's dir after Close: %d entries", len(ents))
		}
	}()
	if s.live == nil {
		t.Fatal("no live pool with PoolSize 1 and LivePoolDir")
	}
	layers := os.Getenv("SANDCELL_LAYER_DIR")
	if layers == "" {
		layers = rootfs.DefaultDir()
	}
	l, err := rootfs.Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	root, err := (&rootfs.Store{Dir: layers}).Root(l)
	testutil.Require(t, err == nil, "layer python: %v", err)
	lim, _, err := limits.Resolve(limits.Defaults(), limits.Ceilings(), limits.Set{})
	if err != nil {
		t.Fatal(err)
	}
	req := &oci.Request{Root: root, Env: []string{"PATH=/usr/bin:/bin"}, Limits: lim}
	for i := range 2 {
		if i == 1 {
			for deadline := time.Now().Add(60 * time.Second); s.live.Idle() < 1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no live sandbox prepared after 60s")
				}
			}
		}
		sb, err := s.StartSandbox(context.Background(), req, oci.SandboxOptions{ID: "s" + strconv.Itoa(i),
			UpperDir: filepath.Join(t.TempDir(), "upper"), DiskBytes: 64 << 20, User: "user", Home: "/home/user"})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy()
	}
	if h := s.live.Hits(); h != 1 {
		t.Errorf("hits = %d, want 1 (the second create)", h)
	}
}

// The test binary is the containers' init too (as cmd/sandcell is).
func init() { backend.Init() }
