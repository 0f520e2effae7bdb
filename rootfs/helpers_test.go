package rootfs

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireRoot skips t unless it runs as root. CI runs as root, so there
// (CI=true) a missing privilege fails the test instead of skipping it.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but not running as root: root tests must not be skipped in CI")
	}
	t.Skip("needs root (mmdebstrap root mode, chroot, mounts)")
}

// skipShort skips t with -short, which means no layer builds (and so no
// network): see "make unit".
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds layers from the Debian mirror; skipped with -short")
	}
}

// testLogger logs to t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func mustLookup(t testing.TB, name string) Language {
	t.Helper()
	l, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mkdirs(t testing.TB, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t testing.TB, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// fakeStore makes a store in a temporary directory whose layers for langs
// are written by hand instead of built from packages: no root, no network.
// Each package layer holds one file, /<layer name>.txt; the skeleton is the
// real one. The store's roots are unmounted when the test ends.
func fakeStore(t testing.TB, langs ...string) *Store {
	t.Helper()
	return fakeStoreWith(t, nil, langs...)
}

// fakeStoreWith is fakeStore whose layers list the packages pkgs gives by
// layer name (default: one package named as the layer, version 1.0).
func fakeStoreWith(t testing.TB, pkgs map[string][]Package, langs ...string) *Store {
	t.Helper()
	s := &Store{Dir: filepath.Join(t.TempDir(), "store")}
	t.Cleanup(func() {
		if os.Geteuid() == 0 {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	fakeLayer(t, s, KindSkeleton, skeletonRecipe(), nil)
	for _, name := range langs {
		specs, err := chain(mustLookup(t, name))
		if err != nil {
			t.Fatal(err)
		}
		var lower []string
		for _, spec := range specs {
			r := spec.recipe(lower)
			ref, ok, err := s.lookupRecipe(r.key())
			if err != nil {
				t.Fatal(err)
			}
			id := ref.id()
			if !ok {
				id = fakeLayerWith(t, s, spec.name, r, map[string]string{spec.name + ".txt": spec.name + "\n"}, pkgs[spec.name])
			}
			lower = append([]string{id}, lower...)
		}
	}
	return s
}

// fakeLayer commits a layer of recipe r holding files (the skeleton if r is
// the skeleton's) and points r's key at it. It returns the layer's id.
func fakeLayer(t testing.TB, s *Store, name string, r recipe, files map[string]string) string {
	t.Helper()
	return fakeLayerWith(t, s, name, r, files, nil)
}

// fakeLayerWith is fakeLayer listing pkgs as the layer's packages (nil:
// one named as the layer, version 1.0).
func fakeLayerWith(t testing.TB, s *Store, name string, r recipe, files map[string]string, pkgs []Package) string {
	t.Helper()
	tmp, err := s.newBuildDir(r.key())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(tmp, "root")
	if r.Kind == KindSkeleton {
		if err := writeSkeleton(root); err != nil {
			t.Fatal(err)
		}
	} else {
		mkdirs(t, root, "usr/bin")
		writeFiles(t, root, files)
		if pkgs == nil {
			pkgs = []Package{{Name: name, Version: "1.0", Arch: "all"}}
		}
		// As a build does: readable by anyone whatever the umask.
		fsroot, err := os.OpenRoot(root)
		if err != nil {
			t.Fatal(err)
		}
		_, err = normalise(fsroot)
		fsroot.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.commitLayer(t.Context(), name, r, pkgs, nil, nil, tmp, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.setRecipe(r.key(), m.ID); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// runResult is what a program run by runInRoot did.
type runResult struct {
	stdout, stderr string
	err            error // nil, or an *exec.ExitError for a non-zero exit
}

// runInRoot runs argv chrooted into root, roughly as the runtime will: as
// uid (SandboxUID, or 0) with lang's environment, in /work, with fresh
// tmpfs on /tmp and /work, /proc and the host's /dev. Those mounts are made
// in a private mount namespace of a locked thread that is never unlocked,
// so they vanish with the thread and never touch the shared root. files are
// written to /work before the run.
func runInRoot(t testing.TB, root string, lang Language, uid int, argv []string, stdin string, files map[string]string) runResult {
	t.Helper()
	ch := make(chan runResult, 1)
	go func() {
		// No UnlockOSThread: the Go runtime ends this thread, and its mount
		// namespace, when the goroutine returns.
		runtime.LockOSThread()
		ch <- runPrivate(root, lang, uid, argv, stdin, files)
	}()
	return <-ch
}

func runPrivate(root string, lang Language, uid int, argv []string, stdin string, files map[string]string) runResult {
	fail := func(err error) runResult { return runResult{err: errors.Join(errors.New("set-up"), err)} }
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fail(err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(err)
	}
	for _, m := range []struct{ src, dst, fstype, opts string }{
		{"tmpfs", "tmp", "tmpfs", "mode=1777,size=512m"},
		{"tmpfs", "work", "tmpfs", "mode=0755,size=256m"},
		{"proc", "proc", "proc", ""},
	} {
		if err := unix.Mount(m.src, filepath.Join(root, m.dst), m.fstype, unix.MS_NOSUID|unix.MS_NODEV, m.opts); err != nil {
			return fail(err)
		}
	}
	if err := unix.Mount("/dev", filepath.Join(root, "dev"), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fail(err)
	}
	work := filepath.Join(root, "work")
	if err := os.Chown(work, uid, uid); err != nil {
		return fail(err)
	}
	for name, data := range files {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			return fail(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			return fail(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/work", "LANG=C.UTF-8", "TERM=dumb"}, lang.Env...)
	cmd.Dir = "/work"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)},
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin = bytes.NewBufferString(stdin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return runResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// checkLayerModes fails t unless every file in the tree at dir can be read
// by any user, every directory traversed, and nothing is setuid, setgid or
// a device, FIFO or socket.
func checkLayerModes(t testing.TB, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m := fi.Mode()
		switch {
		case m&fs.ModeSymlink != 0:
		case m.IsDir() && m&0o005 != 0o005, m.IsRegular() && m&0o004 == 0:
			t.Errorf("%s: mode %v is not world-readable", p, m)
		case !m.IsDir() && !m.IsRegular():
			t.Errorf("%s: special file %v", p, m)
		}
		if m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s: mode %v is setuid/setgid", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
