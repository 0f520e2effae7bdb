package workspace

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/internal/testutil"
)

// sandboxID is the workspace owner in tests run as root: a uid no
// account on the machine has, as the sandbox user's is on a real host.
const sandboxID = 101000

// tempDir returns a new directory under /var/tmp (other processes on the
// test machines clean /tmp), removed when the test ends.
func tempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "sandcell-ws-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Geteuid() != 0 {
			// Tests leave read-only directories, as programs do; only
			// root removes what is in them without this.
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					os.Chmod(p, 0o700)
				}
				return nil
			})
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

// testOwner is the uid and gid workspaces belong to in tests: sandboxID as
// root, the test's own ids otherwise (only root can chown to others).
func testOwner() (uid, gid int) {
	if os.Geteuid() == 0 {
		return sandboxID, sandboxID
	}
	return os.Getuid(), os.Getgid()
}

// clock is a fake Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newStore opens a store in a new directory; opts gets the test owner
// unless it sets one.
func newStore(t testing.TB, opts Options) *Store {
	t.Helper()
	return newStoreIn(t, tempDir(t), opts)
}

// newStoreIn opens a store in a new directory in dir.
func newStoreIn(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if opts.UID == 0 && opts.GID == 0 {
		opts.UID, opts.GID = testOwner()
	}
	s, err := Open(filepath.Join(dir, "sessions"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newSession creates a session in s, gets it and locks it until the test
// ends.
func newSession(t testing.TB, s *Store) *Session {
	t.Helper()
	m, err := s.Create("python", 0)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := s.Get(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := ss.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
	return ss
}

// treeDir is the host path of a session's tree, for tests that plant
// what a hostile Save could have left there or inspect the result.
func treeDir(ss *Session) string {
	return filepath.Join(ss.store.Dir(), ss.meta.ID, filesDir)
}

// workDir returns an empty directory standing for a run's /work: a
// tmpfs like the real one (size-capped, nosuid, nodev, owned by the
// sandbox user) when the test runs as root, a plain directory otherwise.
func workDir(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(tempDir(t), "work")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		return dir
	}
	uid, gid := testOwner()
	opts := "size=" + strconv.FormatInt(size, 10) + ",mode=0755,uid=" + strconv.Itoa(uid) + ",gid=" + strconv.Itoa(gid)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// requireTmpfs skips (fails in CI) unless workDir makes real tmpfs mounts.
func requireTmpfs(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
}

// mustWrite writes a file on the host (a fixture), creating parents.
func mustWrite(t testing.TB, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t testing.TB, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// lstat is os.Lstat's Stat_t.
func lstat(t testing.TB, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}
