package workspace

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/owner"
)

func TestCreateGetListRemove(t *testing.T) {
	clk := newClock()
	s := newStore(t, Options{Now: clk.Now, Quota: 1 << 20, TTL: time.Hour})
	a, err := s.Create("python", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !validID(a.ID) {
		t.Errorf("Create: id %q has not the form s-[a-z2-7]{26}", a.ID)
	}
	if a.TTL != time.Hour || a.Quota != 1<<20 || !a.Created.Equal(clk.Now()) || a.Language != "python" {
		t.Errorf("Create: got %+v, want the store's defaults and the clock's time", a)
	}
	clk.Add(time.Minute)
	b, err := s.Create("", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if b.TTL != 2*time.Hour {
		t.Errorf("Create(ttl 2h): TTL %v", b.TTL)
	}
	if a.ID == b.ID {
		t.Fatal("two sessions got the same id")
	}
	// Sessions and their trees: 0700 root's above, the sandbox user's below.
	uid, gid := testOwner()
	if st := lstat(t, filepath.Join(s.Dir(), a.ID)); st.Mode&0o777 != 0o700 {
		t.Errorf("session directory mode %o, want 0700", st.Mode&0o777)
	}
	if st := lstat(t, s.Dir()); st.Mode&0o777 != 0o700 {
		t.Errorf("store directory mode %o, want 0700", st.Mode&0o777)
	}
	if st := lstat(t, filepath.Join(s.Dir(), a.ID, filesDir)); st.Mode&0o777 != 0o755 || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("tree: mode %o owner %d:%d, want 0755 %d:%d", st.Mode&0o777, st.Uid, st.Gid, uid, gid)
	}

	clk.Add(time.Minute)
	ss, err := s.Get(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := ss.Meta(); got.ID != a.ID || !got.LastUsed.Equal(clk.Now()) || !got.Created.Equal(a.Created) {
		t.Errorf("Get: meta %+v, want LastUsed now and Created unchanged", got)
	}

	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("List: got %+v, want a then b", list)
	}
	if !list[0].LastUsed.Equal(clk.Now()) {
		t.Errorf("List: LastUsed %v, want the Get's time persisted", list[0].LastUsed)
	}

	if err := s.Remove(a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Remove: got %v, want ErrNotFound", err)
	}
	if err := s.Remove(a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove twice: got %v, want ErrNotFound", err)
	}
	if _, err := os.Lstat(filepath.Join(s.Dir(), a.ID)); !os.IsNotExist(err) {
		t.Errorf("session directory still there after Remove: %v", err)
	}
	if _, err := ss.Lock(t.Context()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lock of a removed session: got %v, want ErrNotFound", err)
	}
	names, _ := os.ReadDir(s.Dir())
	if len(names) != 1 || names[0].Name() != b.ID {
		t.Errorf("store holds %v, want only %s", names, b.ID)
	}
}

func TestCreateInvalid(t *testing.T) {
	s := newStore(t, Options{})
	for _, c := range []struct {
		lang string
		ttl  time.Duration
	}{
		{"python", -time.Second},
		{"py thon", 0},
		{"py\nthon", 0},
		{"py/../x\x00", 0},
		{strings.Repeat("x", 65), 0},
	} {
		if _, err := s.Create(c.lang, c.ttl); !errors.Is(err, ErrInvalid) {
			t.Errorf("Create(%q, %v): got %v, want ErrInvalid", c.lang, c.ttl, err)
		}
	}
}

func TestInvalidIDs(t *testing.T) {
	s := newStore(t, Options{})
	m, err := s.Create("c", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{
		"",
		"../x",
		"..",
		".",
		"s-",
		strings.ToUpper(m.ID),
		m.ID + "a",
		m.ID[:len(m.ID)-1],
		m.ID + "/files",
		m.ID + "/../" + m.ID,
		"s-" + strings.Repeat("a", 25) + "1", // 1 is not base32
		"s-" + strings.Repeat("a", 25) + "/",
		"x-" + m.ID[2:],
		strings.Repeat("s-aaaa", 1000),
		filepath.Join(s.Dir(), m.ID),
	} {
		if _, err := s.Get(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("Get(%q): got %v, want ErrInvalid", id, err)
		}
		if err := s.Remove(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("Remove(%q): got %v, want ErrInvalid", id, err)
		}
	}
	unknown := "s-" + strings.Repeat("a", 26)
	if _, err := s.Get(unknown); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(unknown): got %v, want ErrNotFound", err)
	}
	if len(s.states) != 0 {
		t.Errorf("Get of ids that name nothing left %d states in memory", len(s.states))
	}
	if _, err := s.Get(m.ID); err != nil {
		t.Errorf("Get(%q): %v", m.ID, err)
	}
}

func TestExpire(t *testing.T) {
	clk := newClock()
	s := newStore(t, Options{Now: clk.Now, TTL: time.Hour})
	create := func(lang string, ttl time.Duration) Meta {
		t.Helper()
		m, err := s.Create(lang, ttl)
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
		return m
	}
	short := create("a", 0)          // 1h
	long := create("b", 3*time.Hour) // 3h
	refreshed := create("c", 0)      // 1h, used at 50m
	locked := create("d", 0)         // 1h, locked from the start
	ss, err := s.Get(locked.ID)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := ss.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(50 * time.Minute)
	if _, err := s.Get(refreshed.ID); err != nil {
		t.Fatal(err)
	}
	clk.Add(40 * time.Minute) // 90m: short and locked idle for more than 1h, refreshed for 40m

	if _, err := s.Get(short.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an expired session: got %v, want ErrNotFound", err)
	}
	list, _ := s.List()
	var ids []string
	for _, m := range list {
		ids = append(ids, m.ID)
	}
	if want := []string{long.ID, refreshed.ID}; !slices.Equal(ids, want) {
		t.Errorf("List: got %v, want %v (expired sessions left out)", ids, want)
	}

	got, err := s.Expire()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{short.ID}) {
		t.Errorf("Expire: got %v, want [%s] (the locked one is skipped)", got, short.ID)
	}
	unlock()
	got, err = s.Expire()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{locked.ID}) {
		t.Errorf("Expire after unlock: got %v, want [%s]", got, locked.ID)
	}
	if _, err := s.Get(refreshed.ID); err != nil {
		t.Errorf("Get(refreshed): %v", err)
	}

	// Open expires too.
	clk.Add(4 * time.Hour)
	s2, err := Open(s.Dir(), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := s2.List(); len(list) != 0 {
		t.Errorf("after Open 4h later: %d sessions left", len(list))
	}
	if names, _ := os.ReadDir(s.Dir()); len(names) != 0 {
		t.Errorf("after Open 4h later: store holds %v", names)
	}
}

func TestMetaPersists(t *testing.T) {
	clk := newClock()
	s := newStore(t, Options{Now: clk.Now})
	m, err := s.Create("rust", 5*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	ss, err := s.Get(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := ss.Meta()
	s2, err := Open(s.Dir(), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	list, err := s2.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("List after reopening: %d sessions, want 1", len(list))
	}
	got := list[0]
	if got.ID != want.ID || got.Language != want.Language || got.TTL != want.TTL || got.Quota != want.Quota ||
		!got.Created.Equal(want.Created) || !got.LastUsed.Equal(want.LastUsed) {
		t.Errorf("meta after reopening: got %+v, want %+v", got, want)
	}
}

func TestLock(t *testing.T) {
	s := newStore(t, Options{})
	m, _ := s.Create("go", 0)
	a, _ := s.Get(m.ID)
	b, _ := s.Get(m.ID) // another handle on the same session

	if _, err := a.Write("x", []byte("1"), 0); err == nil {
		t.Error("Write without the lock succeeded")
	}
	unlock, err := a.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write("x", []byte("1"), 0); err == nil {
		t.Error("Write through a Session that does not hold the lock succeeded")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second Lock: got %v, want DeadlineExceeded", err)
	}
	if _, err := a.Write("x", []byte("1"), 0); err != nil {
		t.Errorf("Write with the lock: %v", err)
	}

	got := make(chan error, 1)
	go func() {
		unlockB, err := b.Lock(t.Context())
		if err == nil {
			unlockB()
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	unlock()
	unlock() // twice is harmless
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("Lock after unlock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock still waiting after unlock")
	}
	if _, err := a.Write("x", []byte("1"), 0); err == nil {
		t.Error("Write after unlock succeeded")
	}
}

// TestRemoveLocked: Remove of a locked session (by another goroutine, or
// by the caller itself) hides it at once and deletes its files when the
// lock is released; the holder can change nothing meanwhile.
func TestRemoveLocked(t *testing.T) {
	s := newStore(t, Options{})
	m, _ := s.Create("go", 0)
	holder, _ := s.Get(m.ID)
	unlock, err := holder.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := s.Get(m.ID)
	waiting := make(chan error, 1)
	go func() {
		_, err := other.Lock(t.Context())
		waiting <- err
	}()
	if err := s.Remove(m.ID); err != nil {
		t.Fatalf("Remove of a locked session: %v", err)
	}
	if err := s.Remove(m.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove twice: got %v, want ErrNotFound", err)
	}
	if _, err := s.Get(m.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a removed, locked session: got %v, want ErrNotFound", err)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Errorf("List shows %d sessions after Remove", len(list))
	}
	if _, err := holder.Write("x", []byte("1"), 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("Write by the holder after Remove: got %v, want ErrNotFound", err)
	}
	if _, _, err := holder.Save(workDir(t, 1<<20)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Save by the holder after Remove: got %v, want ErrNotFound", err)
	}
	dir := filepath.Join(s.Dir(), m.ID)
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("files deleted before unlock: %v", err)
	}
	unlock()
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Lock waiting during Remove: got %v, want ErrNotFound", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock still waiting after unlock")
	}
	if names, _ := os.ReadDir(s.Dir()); len(names) != 0 {
		t.Errorf("store after unlock holds %v, want nothing", names)
	}

	// The MCP layer's pattern: lock, remove, unlock.
	m, _ = s.Create("go", 0)
	ss, _ := s.Get(m.ID)
	unlock, err = ss.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(m.ID); err != nil {
		t.Fatalf("Remove under the caller's own lock: %v", err)
	}
	unlock()
	if names, _ := os.ReadDir(s.Dir()); len(names) != 0 {
		t.Errorf("store after lock, Remove, unlock holds %v", names)
	}
}

func TestCrashRecovery(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	id := ss.Meta().ID
	if _, err := ss.Write("keep/a.txt", []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	sessDir := filepath.Join(s.Dir(), id)
	metaBefore, err := os.ReadFile(filepath.Join(sessDir, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	// What kill -9 can leave: a Save's tree half copied (or the old tree
	// after the swap), a meta.json update half written, a session half
	// created, a session half removed.
	mustWrite(t, filepath.Join(sessDir, newTreeTmp+"abc", "half", "b.txt"), "partial", 0o644)
	mustSymlink(t, "/etc", filepath.Join(sessDir, newTreeTmp+"abc", "etc"))
	mustWrite(t, filepath.Join(sessDir, metaTmp+"xyz"), `{"id":"`+id+`","lang`, 0o600)
	mustWrite(t, filepath.Join(s.Dir(), createTmp+"s-x-1", metaFile), "{", 0o600)
	mustWrite(t, filepath.Join(s.Dir(), removeTmp+"s-y-2", filesDir, "c"), "c", 0o600)
	// Not ours: left alone.
	mustWrite(t, filepath.Join(s.Dir(), "README"), "admin's note", 0o600)

	s2, err := Open(s.Dir(), Options{UID: s.opts.UID, GID: s.opts.GID})
	if err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(s.Dir())
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	if want := []string{"README", id}; !slices.Equal(got, want) {
		t.Errorf("store after recovery: %v, want %v", got, want)
	}
	names, _ = os.ReadDir(sessDir)
	got = got[:0]
	for _, n := range names {
		got = append(got, n.Name())
	}
	if want := []string{filesDir, metaFile}; !slices.Equal(got, want) {
		t.Errorf("session after recovery: %v, want %v", got, want)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("recovery removed through a symlink: %v", err)
	}
	metaAfter, _ := os.ReadFile(filepath.Join(sessDir, metaFile))
	if string(metaAfter) != string(metaBefore) {
		t.Errorf("meta.json changed by recovery:\n%s\nwant\n%s", metaAfter, metaBefore)
	}
	ss2, err := s2.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := ss2.Read("keep/a.txt", 0, 0)
	if err != nil || string(data) != "precious" {
		t.Errorf("file after recovery: %q, %v", data, err)
	}
}

// TestSessionCaps (issue #17): sessions were unbounded (200 extra were
// accepted from one client) and a client's ttl had no maximum.
func TestSessionCaps(t *testing.T) {
	clk := newClock()
	s := newStore(t, Options{Now: clk.Now, MaxSessions: 3, MaxPerClient: 2, TTL: time.Hour, MaxTTL: 2 * time.Hour})
	var a []Meta
	for range 2 {
		m, err := s.CreateFor("client-a", "python", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		a = append(a, m)
	}
	if _, err := s.CreateFor("client-a", "python", "", 0); !errors.Is(err, ErrTooMany) {
		t.Errorf("a client's third session with 2 per client: %v, want ErrTooMany", err)
	}
	if _, err := s.CreateFor("client-b", "python", "", 0); err != nil {
		t.Fatalf("another client's first session: %v", err)
	}
	if _, err := s.Create("python", 0); !errors.Is(err, ErrTooMany) {
		t.Errorf("a fourth session with 3 in all: %v, want ErrTooMany", err)
	}
	// A closed session frees its client's place and the store's.
	if err := s.Remove(a[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateFor("client-a", "python", "", 0); err != nil {
		t.Errorf("a client's session after it closed one: %v", err)
	}
	// Expired sessions make room: the store expires them when full.
	clk.Add(3 * time.Hour)
	m, err := s.CreateFor("client-c", "python", "", 10*time.Hour)
	if err != nil {
		t.Fatalf("a session once the others expired: %v", err)
	}
	if m.TTL != 2*time.Hour {
		t.Errorf("ttl of 10h with a 2h maximum: got %v, want 2h", m.TTL)
	}
	if _, err := Open(t.TempDir(), Options{TTL: 3 * time.Hour, MaxTTL: time.Hour}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open with a default TTL over the maximum: %v, want ErrInvalid", err)
	}
}

// TestRecoverSparesLiveServers (issue #17): two servers may share a
// sessions directory; opening the store removes a temporary (a save in
// flight, a session being made) only if the process that made it is dead.
func TestRecoverSparesLiveServers(t *testing.T) {
	dir := tempDir(t)
	s := newStoreIn(t, dir, Options{})
	m, err := s.Create("python", 0)
	if err != nil {
		t.Fatal(err)
	}
	sessDir := filepath.Join(s.Dir(), m.ID)
	// This process's own temporaries stand for another live server's.
	live := filepath.Join(sessDir, tmpName(newTreeTmp))
	liveCreate := filepath.Join(s.Dir(), tmpName(createTmp+m.ID+"-"))
	// A dead process's (a reaped child's token) and an older sandcell's.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	self, _ := owner.Self()
	deadTok := owner.Token{PID: cmd.Process.Pid, Start: 1, PIDNS: self.PIDNS}
	dead := filepath.Join(sessDir, newTreeTmp+deadTok.String()+"_abcdefghij")
	old := filepath.Join(sessDir, newTreeTmp+"abcdefghij")
	for _, d := range []string{live, liveCreate, dead, old} {
		mustWrite(t, filepath.Join(d, "f"), "x", 0o644)
	}
	newStoreIn(t, dir, Options{})
	for _, d := range []string{live, liveCreate} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a live process's temporary %s was removed: %v", filepath.Base(d), err)
		}
	}
	for _, d := range []string{dead, old} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("a dead process's temporary %s was left", filepath.Base(d))
		}
	}
}
