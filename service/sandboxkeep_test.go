package service

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
)

// dieAndWait ends box n's sandbox by its init's death (files kept) and
// waits until it left the table.
func (e *liveEnv) dieAndWait(n, live int) {
	e.t.Helper()
	e.live.box(n).die("killed by a test")
	for deadline := time.Now().Add(5 * time.Second); e.l.LiveSandboxes() != live; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d live sandboxes, want %d", e.l.LiveSandboxes(), live)
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestKeptFilesSwept: the files an ended sandbox keeps are removed once
// KeepFiles passed since it ended; a running sandbox's files, files that
// another server has locked (it runs that sandbox) and what has no
// sandbox id's name never are; a re-create on locked files is refused.
func TestKeptFilesSwept(t *testing.T) {
	e := newLiveEnv(t, SandboxOptions{KeepFiles: time.Hour})
	a := e.create(api.SandboxSpec{LifetimeMS: (10 * time.Hour).Milliseconds()})
	b := e.create(api.SandboxSpec{LifetimeMS: (10 * time.Hour).Milliseconds()})
	e.dieAndWait(0, 1)
	// Another server's sandbox in the shared directory, ended long ago
	// by its record, but running (its lock held).
	other := newID()
	odir := filepath.Join(e.dir, other)
	if err := os.MkdirAll(odir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := e.clk.Now().Add(-100 * time.Hour)
	os.WriteFile(filepath.Join(odir, recordFile), []byte(`{}`), 0o600)
	os.Chtimes(filepath.Join(odir, recordFile), old, old)
	held, err := os.OpenFile(filepath.Join(odir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	notOurs := filepath.Join(e.dir, "lost+found")
	os.Mkdir(notOurs, 0o700)
	os.Chtimes(notOurs, old, old)

	if n, err := e.l.sweepKept(); n != 0 || err != nil || !exists(filepath.Join(e.dir, a.ID)) {
		t.Fatalf("sweep before KeepFiles: removed %d, %v; a's files there: %v", n, err, exists(filepath.Join(e.dir, a.ID)))
	}
	_, err = e.l.CreateSandbox(e.ctx, api.SandboxSpec{Metadata: map[string]string{SandboxIDKey: other}})
	wantErr(t, "re-create on files another server holds", err, api.ErrInvalid, "in use")

	e.clk.Advance(2 * time.Hour)
	n, err := e.l.sweepKept()
	if n != 1 || err != nil {
		t.Errorf("sweep after KeepFiles: removed %d, %v; want a's files only", n, err)
	}
	for p, want := range map[string]bool{filepath.Join(e.dir, a.ID): false, filepath.Join(e.dir, b.ID): true, odir: true, notOurs: true} {
		if exists(p) != want {
			t.Errorf("%s there: %v, want %v", filepath.Base(p), !want, want)
		}
	}
	held.Close() // the other server died
	if n, err := e.l.sweepKept(); n != 1 || err != nil || exists(odir) {
		t.Errorf("sweep after the other server died: removed %d, %v", n, err)
	}
}

// TestKeptFilesBounded: at most Max sandboxes' files are kept, the
// oldest removed first.
func TestKeptFilesBounded(t *testing.T) {
	e := newLiveEnv(t, SandboxOptions{Max: 2})
	var ids []string
	for i := range 3 {
		ids = append(ids, e.create(api.SandboxSpec{}).ID)
		e.dieAndWait(i, 0)
		e.clk.Advance(time.Second) // each ended a second after the last
	}
	if n, err := e.l.sweepKept(); n != 1 || err != nil {
		t.Errorf("removed %d, %v; want the oldest only", n, err)
	}
	for i, id := range ids {
		if want := i > 0; exists(filepath.Join(e.dir, id)) != want {
			t.Errorf("sandbox %d's files there: %v, want %v", i, !want, want)
		}
	}
}

// TestListDirInNameOrder: a listing is in name order, depth first (as
// envd's and Go's WalkDir), not the directory's own order.
func TestListDirInNameOrder(t *testing.T) {
	e := newLiveEnv(t, SandboxOptions{})
	id := e.create(api.SandboxSpec{}).ID
	for _, p := range []string{"/home/user/d/c.txt", "/home/user/d/b/z.txt", "/home/user/d/a.txt", "/home/user/d/b/y.txt", "/home/user/d/b-x.txt"} {
		if _, err := e.l.WriteFile(e.ctx, id, p, []byte("x"), ""); err != nil {
			t.Fatal(err)
		}
	}
	list, err := e.l.ListDir(e.ctx, id, "/home/user/d", 2)
	var got []string
	for _, f := range list {
		got = append(got, strings.TrimPrefix(f.Path, "/home/user/d/"))
	}
	if want := []string{"a.txt", "b", "b/y.txt", "b/z.txt", "b-x.txt", "c.txt"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("list: %v %q, want %q", err, got, want)
	}
}
