package backend_test

import (
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/seccomp"
)

// Same as cmd/sandcell's init hook: the test binary is the container's init.
func init() {
	backend.Init()
	if pid := os.Getenv(filterOfEnv); pid != "" {
		printFilterOf(pid)
	}
	if os.Getenv(selfExeEnv) != "" {
		printSelfExe()
	}
}

// layerStores are the stores layerRoot used, one per directory: a Store
// caches the roots it found mounted.
var layerStores sync.Map

func layerStore(dir string) *rootfs.Store {
	s, _ := layerStores.LoadOrStore(dir, &rootfs.Store{Dir: dir})
	return s.(*rootfs.Store)
}

// layerRoot returns the built root filesystem of a language from the store
// that `make layers` fills (SANDCELL_LAYER_DIR). In CI a missing layer fails.
func layerRoot(t testing.TB, lang string) string {
	t.Helper()
	dir := os.Getenv("SANDCELL_LAYER_DIR")
	if dir == "" {
		dir = rootfs.DefaultDir()
	}
	l, err := rootfs.Lookup(lang)
	if err != nil {
		t.Fatal(err)
	}
	root, err := layerStore(dir).Root(l)
	testutil.Require(t, err == nil, "layer %s: %v (make test builds it)", lang, err)
	return root
}

// testEnv is a runtime with its own state dir and parent cgroup, removed
// when the test ends.
type testEnv struct {
	backend  string      // "runc", "forkserver" (runc's semantics, init from the fork server) or "gvisor"
	runtime  oci.Runtime // the backend under test
	rt       *backend.Libcontainer
	parent   *limits.Parent
	stateDir string
	mode     limits.Mode
	cgPath   string
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	return newTestEnvWith(t, false)
}

// newForkEnv is newTestEnv with the fork server on (backend "forkserver").
func newForkEnv(t testing.TB) *testEnv {
	t.Helper()
	e := newTestEnvWith(t, true)
	e.backend = "forkserver"
	return e
}

func newTestEnvWith(t testing.TB, fork bool) *testEnv {
	t.Helper()
	// Removed last, after the cleanup below; RemoveCgroups then reports a
	// cgroup that the parent's own Remove missed.
	stateDir, cgPath := testutil.StateDir(t, "sandcell-test-")
	e := &testEnv{stateDir: stateDir, mode: limits.DetectMode(), cgPath: cgPath}
	var err error
	e.parent, err = limits.EnsureParent(limits.ParentConfig{Path: e.cgPath, MemoryBytes: 4 << 30, Pids: 4096})
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the runtime opens: a failure there leaves no parent.
	t.Cleanup(func() {
		if e.rt != nil {
			if err := e.rt.Close(); err != nil {
				t.Errorf("runtime close: %v", err)
			}
		}
		if _, err := e.parent.RemoveStale(func(string) bool { return false }); err != nil {
			t.Errorf("remove stale cgroups: %v", err)
		}
		if err := e.parent.Remove(); err != nil {
			t.Errorf("remove parent cgroup: %v", err)
		}
	})
	e.rt = e.newRuntimeWith(t, fork)
	e.backend, e.runtime = "runc", e.rt
	return e
}

func (e *testEnv) newRuntime(t testing.TB) *backend.Libcontainer {
	t.Helper()
	return e.newRuntimeWith(t, e.backend == "forkserver")
}

func (e *testEnv) newRuntimeWith(t testing.TB, fork bool) *backend.Libcontainer {
	t.Helper()
	filter, err := seccomp.Profile()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := backend.NewLibcontainer(backend.LibcontainerConfig{
		StateDir: e.stateDir, Seccomp: filter, Cgroups: e.parent, CgroupMode: e.mode, ForkServer: fork,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// testLimits are the server defaults, resolved.
func testLimits(t testing.TB, req limits.Set) limits.Set {
	t.Helper()
	l, _, err := limits.Resolve(limits.Defaults(), limits.Ceilings(), req)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// forEachBackend runs a test against every isolation backend: one suite,
// with per-backend expectations only where the semantics differ.
func forEachBackend(t *testing.T, f func(t *testing.T, e *testEnv)) {
	t.Run("runc", func(t *testing.T) { f(t, newTestEnv(t)) })
	t.Run("forkserver", func(t *testing.T) { f(t, newForkEnv(t)) })
	t.Run("gvisor", func(t *testing.T) { f(t, newGVisorEnv(t)) })
}

// newGVisorEnv is a testEnv whose backend is gVisor (runsc from PATH).
func newGVisorEnv(t *testing.T) *testEnv {
	t.Helper()
	_, err := exec.LookPath("runsc")
	testutil.Require(t, err == nil, "runsc not installed (apt-get install runsc)")
	e := newTestEnv(t)
	filter, err := seccomp.GVisorProfile()
	if err != nil {
		t.Fatal(err)
	}
	g, err := backend.NewRunsc(e.rt, backend.RunscConfig{Seccomp: filter})
	if err != nil {
		t.Fatal(err)
	}
	e.backend, e.runtime = "gvisor", g
	return e
}
