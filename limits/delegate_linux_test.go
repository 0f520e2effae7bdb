package limits

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandcell/sandcell/internal/testutil"
)

// Delegation on fake trees. The fake kernel (fakeKernel) creates a cgroup's control files on
// mkdir, owned by the creating user as cgroupfs does, moves a pid from every cgroup.procs to the
// one written, and answers access(2) W_OK for a pretend user: a file is writable if that user
// owns it. Delegate chowns for real, so these tests need root (they fail under CI=true without
// it): a temp dir lets root chown, and os.Stat shows the owner.

const (
	testUID = 4242
	testGID = 4343
)

// fakeKernel emulates what delegation asks of the kernel on a fake tree under root.
type fakeKernel struct {
	t    *testing.T
	root string
	// uid is the pretend user: it owns what mkdir creates, and can write what it owns.
	// 0 is root, who can write anything.
	uid int
	// own is this process's cgroup v2 path.
	own string
}

func (k *fakeKernel) ops() delegOps {
	return delegOps{writable: k.writable, ownCgroup: k.ownCgroup, move: k.move, mkdir: k.mkdir}
}

func (k *fakeKernel) writable(p string) bool {
	fi, err := os.Lstat(p)
	if err != nil {
		return false
	}
	return k.uid == 0 || int(fi.Sys().(*syscall.Stat_t).Uid) == k.uid
}

func (k *fakeKernel) ownCgroup() (string, error) { return k.own, nil }

// move takes pid out of every cgroup.procs of the tree and appends it to procs.
func (k *fakeKernel) move(procs string, pid int) error {
	if !exists(procs) {
		return &fs.PathError{Op: "open", Path: procs, Err: fs.ErrNotExist}
	}
	err := filepath.WalkDir(k.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" {
			return err
		}
		pids := readPids(k.t, p)
		if i := slices.Index(pids, pid); i >= 0 {
			return os.WriteFile(p, []byte(procs2(slices.Delete(pids, i, i+1))), 0o644)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return os.WriteFile(procs, []byte(procs2(append(readPids(k.t, procs), pid))), 0o644)
}

// mkdir creates a cgroup with the control files the kernel would give it, owned by k.uid: on
// v2 (the parent has cgroup.controllers) the controllers the parent enabled for its children.
func (k *fakeKernel) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{"cgroup.procs": ""}
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "cgroup.subtree_control")); err == nil {
		var ctrls []string
		for _, f := range strings.Fields(string(b)) {
			ctrls = append(ctrls, strings.TrimPrefix(f, "+"))
		}
		files["cgroup.controllers"] = strings.Join(ctrls, " ")
		files["cgroup.subtree_control"] = ""
		files["cgroup.threads"] = ""
		files["cgroup.events"] = "populated 0\nfrozen 0"
		files["memory.max"] = "max"
		files["pids.max"] = "max"
	} else {
		files["tasks"] = ""
		files["notify_on_release"] = "0"
		files["cgroup.clone_children"] = "0"
	}
	writeFiles(k.t, dir, files)
	for _, p := range append(filesIn(k.t, dir), dir) {
		if err := os.Lchown(p, k.uid, k.uid); err != nil {
			return err
		}
	}
	return nil
}

func procs2(pids []int) string { return procs(pids...) }

func readPids(t *testing.T, p string) []int {
	t.Helper()
	var pids []int
	for _, f := range strings.Fields(readString(t, p)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		pids = append(pids, n)
	}
	return pids
}

func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

func ownerGroup(t *testing.T, p string) (uid, gid int) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

// snapshot maps every file and directory under root to its content (files) and owner.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		uid, gid := ownerGroup(t, p)
		v := "dir"
		if !d.IsDir() {
			v = readString(t, p)
		}
		out[rel] = v + " owner " + strconv.Itoa(uid) + ":" + strconv.Itoa(gid)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// changes lists the paths whose content or owner differ between two snapshots, or that exist in
// only one of them, sorted.
func changes(before, after map[string]string) []string {
	var out []string
	for p, v := range before {
		if after[p] != v {
			out = append(out, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// wantOwners checks the owner uid:gid of paths relative to root.
func wantOwners(t *testing.T, root string, want map[string][2]int) {
	t.Helper()
	for rel, w := range want {
		if uid, gid := ownerGroup(t, filepath.Join(root, rel)); uid != w[0] || gid != w[1] {
			t.Errorf("%s owned by %d:%d, want %d:%d", rel, uid, gid, w[0], w[1])
		}
	}
}

// wantFiles checks the content of files relative to root.
func wantFiles(t *testing.T, root string, want map[string]string) {
	t.Helper()
	for rel, w := range want {
		if got := readString(t, filepath.Join(root, rel)); got != w {
			t.Errorf("%s = %q, want %q", rel, got, w)
		}
	}
}

// mkCgroup creates a fake cgroup v2 cgroup at rel, owned (directory and delegation files) by uid,
// offering controllers.
func mkCgroup(t *testing.T, root, rel string, uid int, controllers string) {
	t.Helper()
	dir := filepath.Join(root, rel)
	writeFiles(t, dir, map[string]string{
		"cgroup.procs": "", "cgroup.subtree_control": "", "cgroup.threads": "", "cgroup.controllers": controllers,
	})
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.subtree_control"), filepath.Join(dir, "cgroup.threads")} {
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
}

func v2DelegateConfig(t *testing.T, root string) DelegateConfig {
	return DelegateConfig{UID: testUID, GID: testGID, User: "alice", Root: root, Mode: Unified,
		MemoryBytes: 1 << 30, Pids: 100, Logger: testLogger(t)}
}

// delegatedV2 returns a fake cgroup v2 tree on which Delegate made /sandcell-u4242 for testUID.
func delegatedV2(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	root := fakeV2(t)
	// The kernel creates these files with the directory; containerd's manager makes the
	// directory, so a fake tree needs them up front.
	writeFiles(t, filepath.Join(root, "sandcell-u4242"), map[string]string{
		"cgroup.procs":           "",
		"cgroup.threads":         "",
		"cgroup.controllers":     "cpu memory pids",
		"cgroup.subtree_control": "",
		"memory.max":             "max",
		"memory.swap.max":        "max",
		"pids.max":               "max",
	})
	k := &fakeKernel{t: t, root: root}
	if _, err := delegate(v2DelegateConfig(t, root), k.ops()); err != nil {
		t.Fatalf("Delegate() error = %v", err)
	}
	return root
}

func TestDelegateInvalid(t *testing.T) {
	root := fakeV1(t, "memory", "pids", "cpu", "cpuacct")
	tests := []struct {
		name string
		cfg  DelegateConfig
	}{
		{"root uid", DelegateConfig{UID: 0, GID: 0, MemoryBytes: 1 << 30, Pids: 10}},
		{"negative gid", DelegateConfig{UID: testUID, GID: -1, MemoryBytes: 1 << 30, Pids: 10}},
		{"root path", DelegateConfig{UID: testUID, GID: testGID, Path: "/", MemoryBytes: 1 << 30, Pids: 10}},
		{"dot-dot path", DelegateConfig{UID: testUID, GID: testGID, Path: "/a/../b", MemoryBytes: 1 << 30, Pids: 10}},
		{"no memory", DelegateConfig{UID: testUID, GID: testGID, Pids: 10}},
		{"no pids", DelegateConfig{UID: testUID, GID: testGID, MemoryBytes: 1 << 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Root, tt.cfg.Mode = root, Legacy
			if _, err := Delegate(tt.cfg); !errors.Is(err, ErrInvalid) {
				t.Errorf("Delegate(%+v) error = %v, want ErrInvalid", tt.cfg, err)
			}
		})
	}
	if exists(filepath.Join(root, "memory", "sandcell-u4242")) {
		t.Errorf("an invalid Delegate created a cgroup")
	}
}

func TestDelegateV2Fake(t *testing.T) {
	testutil.RequireRoot(t)
	root := fakeV2(t)
	writeFiles(t, filepath.Join(root, "sandcell-u4242"), map[string]string{
		"cgroup.procs": "", "cgroup.threads": "", "cgroup.controllers": "cpu memory pids", "cgroup.subtree_control": "",
		"memory.max": "max", "memory.swap.max": "max", "pids.max": "max",
	})
	// An earlier mistake (a chown -R) gave the user a ceiling: Delegate takes it back.
	if err := os.Lchown(filepath.Join(root, "sandcell-u4242", "pids.max"), testUID, testGID); err != nil {
		t.Fatal(err)
	}
	k := &fakeKernel{t: t, root: root}
	cfg := v2DelegateConfig(t, root)
	res, err := delegate(cfg, k.ops())
	if err != nil {
		t.Fatalf("Delegate() error = %v", err)
	}
	if res.Path != "/sandcell-u4242" || res.Delegated != "/sandcell-u4242/user" || res.Mode != Unified {
		t.Errorf("Delegate() = %+v, want path /sandcell-u4242, delegated /sandcell-u4242/user, unified", res)
	}
	for _, want := range []string{
		"echo $$ > " + filepath.Join(root, "sandcell-u4242/user/cgroup.procs") + " && exec su -l alice",
		systemdRunCommand,
		"user-4242.slice",
	} {
		if !strings.Contains(res.Instructions, want) {
			t.Errorf("Delegate() Instructions = %q, want it to contain %q", res.Instructions, want)
		}
	}
	check := func(memory, pids string) {
		t.Helper()
		wantFiles(t, root, map[string]string{
			"cgroup.subtree_control":                "+cpu +memory +pids",
			"sandcell-u4242/memory.max":             memory,
			"sandcell-u4242/memory.swap.max":        "0",
			"sandcell-u4242/pids.max":               pids,
			"sandcell-u4242/cgroup.subtree_control": "+memory +pids +cpu",
			// what the fake kernel gave user from its parent's subtree_control
			"sandcell-u4242/user/cgroup.controllers": "memory pids cpu",
		})
		rootOwned, user := [2]int{0, 0}, [2]int{testUID, testGID}
		owners := map[string][2]int{
			"sandcell-u4242":                             rootOwned,
			"sandcell-u4242/user":                        user,
			"sandcell-u4242/user/cgroup.procs":           user,
			"sandcell-u4242/user/cgroup.subtree_control": user,
			"sandcell-u4242/user/cgroup.threads":         user,
			"sandcell-u4242/user/cgroup.controllers":     rootOwned,
			"sandcell-u4242/user/cgroup.events":          rootOwned,
			"sandcell-u4242/user/memory.max":             rootOwned,
			"sandcell-u4242/user/pids.max":               rootOwned,
		}
		for _, f := range filesIn(t, filepath.Join(root, "sandcell-u4242")) {
			rel, _ := filepath.Rel(root, f)
			owners[rel] = rootOwned
		}
		wantOwners(t, root, owners)
	}
	check("1073741824", "100")

	// Again, with other ceilings: they change, the rest stays.
	cfg.MemoryBytes, cfg.Pids = 512<<20, 50
	if _, err := delegate(cfg, k.ops()); err != nil {
		t.Fatalf("Delegate() again error = %v", err)
	}
	check("536870912", "50")
}

func TestOpenDelegatedV2Fake(t *testing.T) {
	root := delegatedV2(t)
	// Root started the server in the delegated cgroup: the server (100) and the process that
	// started it in its user namespace (101).
	writeFiles(t, filepath.Join(root, "sandcell-u4242", "user"), map[string]string{"cgroup.procs": procs(100, 101)})
	before := snapshot(t, root)

	k := &fakeKernel{t: t, root: root, uid: testUID, own: "/sandcell-u4242/user"}
	fo := newFakeOps(root)
	cfg := DelegatedConfig{UID: testUID, Root: root, Mode: Unified, Logger: testLogger(t)}
	p, err := openDelegated(cfg, k.ops(), fo.ops())
	if err != nil {
		t.Fatalf("OpenDelegated() error = %v", err)
	}
	if p.Path() != "/sandcell-u4242/user/runs" || !p.Delegated() || p.Mode() != Unified {
		t.Errorf("OpenDelegated() = path %q delegated %v mode %s, want /sandcell-u4242/user/runs, true, unified", p.Path(), p.Delegated(), p.Mode())
	}
	user := filepath.Join(root, "sandcell-u4242", "user")
	if got := readPids(t, filepath.Join(user, "cgroup.procs")); len(got) != 0 {
		t.Errorf("delegated cgroup still holds %v, want every process moved to its server leaf", got)
	}
	if got := readPids(t, filepath.Join(user, "server", "cgroup.procs")); !reflect.DeepEqual(got, []int{100, 101}) {
		t.Errorf("server/cgroup.procs = %v, want [100 101]", got)
	}
	wantFiles(t, user, map[string]string{
		"cgroup.subtree_control":      "+memory +pids +cpu",
		"runs/cgroup.controllers":     "memory pids cpu",
		"runs/cgroup.subtree_control": "+memory +pids +cpu",
	})
	// It wrote the delegated cgroup's cgroup.procs and cgroup.subtree_control, and made server
	// and runs: nothing else, and no limit anywhere.
	var unexpected []string
	for _, c := range changes(before, snapshot(t, root)) {
		switch {
		case c == "sandcell-u4242/user/cgroup.procs", c == "sandcell-u4242/user/cgroup.subtree_control",
			strings.HasPrefix(c, "sandcell-u4242/user/server"), strings.HasPrefix(c, "sandcell-u4242/user/runs"):
		default:
			unexpected = append(unexpected, c)
		}
	}
	if len(unexpected) > 0 {
		t.Errorf("OpenDelegated() changed %q", unexpected)
	}

	// Called again from the server leaf (or by a server restarted in its scope): same parent,
	// no server leaf inside the leaf.
	k.own = "/sandcell-u4242/user/server"
	again, err := openDelegated(cfg, k.ops(), fo.ops())
	if err != nil {
		t.Fatalf("OpenDelegated() from the server leaf error = %v", err)
	}
	if again.Path() != p.Path() {
		t.Errorf("OpenDelegated() from the server leaf = %q, want %q", again.Path(), p.Path())
	}
	if exists(filepath.Join(user, "server", "server")) {
		t.Errorf("OpenDelegated() from the server leaf made server/server")
	}
	if d := detectDelegation(cfg, k.ops()); d.Tier != TierDelegated || d.Parent != p.Path() {
		t.Errorf("DetectDelegation() = %+v, want tier 2 with parent %s", d, p.Path())
	} else if want := "tier 2: delegated cgroup /sandcell-u4242/user/runs (cgroup v2)"; d.String() != want {
		t.Errorf("Delegation.String() = %q, want %q", d.String(), want)
	}

	// The parent's cleanup works below runs and never above it.
	if got := p.ChildPath("run1"); got != "/sandcell-u4242/user/runs/run1" {
		t.Errorf("ChildPath(run1) = %q", got)
	}
	writeFiles(t, filepath.Join(user, "runs", "run1"), map[string]string{"cgroup.procs": procs(200)})
	removed, err := p.RemoveStale(nil)
	if err != nil || !reflect.DeepEqual(removed, []string{"run1"}) {
		t.Errorf("RemoveStale() = %q, %v, want [run1]", removed, err)
	}
	if got := fo.killedPids(); !reflect.DeepEqual(got, []int{200}) {
		t.Errorf("RemoveStale() killed %v, want [200] (never the server's 100, 101)", got)
	}
	if err := p.Remove(); err != nil {
		t.Errorf("Remove() error = %v", err)
	}
	if exists(filepath.Join(user, "runs")) {
		t.Errorf("Remove() left runs")
	}
	for _, d := range []string{"sandcell-u4242", "sandcell-u4242/user", "sandcell-u4242/user/server"} {
		if !exists(filepath.Join(root, d)) {
			t.Errorf("Remove() removed %s", d)
		}
	}

	// Undelegate refuses while the server runs, and removes nothing.
	dcfg := v2DelegateConfig(t, root)
	if err := undelegate(dcfg, fo.ops()); !errors.Is(err, ErrBusy) {
		t.Errorf("Undelegate() with a running server error = %v, want ErrBusy", err)
	}
	if !exists(filepath.Join(user, "server")) {
		t.Fatalf("Undelegate() removed part of a busy subtree")
	}
	writeFiles(t, filepath.Join(user, "server"), map[string]string{"cgroup.procs": ""})
	if err := undelegate(dcfg, fo.ops()); err != nil {
		t.Errorf("Undelegate() error = %v", err)
	}
	if exists(filepath.Join(root, "sandcell-u4242")) {
		t.Errorf("Undelegate() left /sandcell-u4242")
	}
	if len(fo.killedPids()) != 1 {
		t.Errorf("Undelegate() killed a process")
	}
}

func TestOpenDelegatedV2Refused(t *testing.T) {
	const systemdScope = "/user.slice/user-4242.slice/user@4242.service/app.slice/run-1.scope"
	tests := []struct {
		name  string
		uid   int    // the pretend user
		own   string // its cgroup
		setup func(t *testing.T, root string)
		want  string // the fix the error names
	}{
		{
			name: "another user's cgroup",
			uid:  4343, own: "/sandcell-u4242/user",
			want: "sudo sandcell setup --user bob",
		},
		{
			name: "systemd session",
			uid:  testUID, own: "/user.slice/user-4242.slice/session-3.scope",
			setup: func(t *testing.T, root string) {
				mkCgroup(t, root, "/user.slice/user-4242.slice/session-3.scope", 0, "memory pids cpu")
			},
			want: systemdRunCommand,
		},
		{
			name: "systemd scope without cpu",
			uid:  testUID, own: systemdScope,
			setup: func(t *testing.T, root string) { mkCgroup(t, root, systemdScope, testUID, "memory pids") },
			want:  systemdControllersFix,
		},
		{
			name: "set up but started elsewhere",
			uid:  testUID, own: "/elsewhere",
			setup: func(t *testing.T, root string) { mkCgroup(t, root, "/elsewhere", 0, "memory pids cpu") },
			want:  "echo $$ > ",
		},
		{
			name: "root cgroup",
			uid:  testUID, own: "/",
			want: "sudo sandcell setup --user alice",
		},
		{
			name: "controllers not enabled above",
			uid:  testUID, own: "/sandcell-u4242/user",
			setup: func(t *testing.T, root string) {
				writeFiles(t, filepath.Join(root, "sandcell-u4242", "user"), map[string]string{"cgroup.controllers": "cpu"})
			},
			want: "sudo sandcell setup --user alice",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := delegatedV2(t)
			if tt.setup != nil {
				tt.setup(t, root)
			}
			before := snapshot(t, root)
			k := &fakeKernel{t: t, root: root, uid: tt.uid, own: tt.own}
			cfg := DelegatedConfig{UID: tt.uid, User: map[int]string{testUID: "alice", 4343: "bob"}[tt.uid], Root: root, Mode: Unified}
			fo := newFakeOps(root)
			_, err := openDelegated(cfg, k.ops(), fo.ops())
			if !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("OpenDelegated() error = %v, want ErrNotDelegated naming %q", err, tt.want)
			}
			if c := changes(before, snapshot(t, root)); len(c) > 0 {
				t.Errorf("a refused OpenDelegated() changed %q", c)
			}
			d := detectDelegation(cfg, k.ops())
			if d.Tier != TierNone || !strings.Contains(d.Fix, tt.want) || !errors.Is(d.Err, ErrNotDelegated) {
				t.Errorf("DetectDelegation() = %+v, want tier 3 with a fix naming %q", d, tt.want)
			}
			if !strings.HasPrefix(d.String(), "tier 3: no cgroups: run `") {
				t.Errorf("Delegation.String() = %q", d.String())
			}
		})
	}
}

func v1DelegateConfig(t *testing.T, root string) DelegateConfig {
	return DelegateConfig{UID: testUID, GID: testGID, User: "alice", Root: root, Mode: Legacy,
		MemoryBytes: 1 << 30, Pids: 100, Logger: testLogger(t)}
}

func TestDelegateV1Fake(t *testing.T) {
	testutil.RequireRoot(t)
	root := fakeV1(t, "memory", "pids", "cpu", "cpuacct", "freezer", "systemd")
	// An existing parent on an old kernel that did not charge children to parents, with swap
	// accounting on.
	writeFiles(t, filepath.Join(root, "memory", "sandcell-u4242"), map[string]string{
		"cgroup.procs":                "",
		"memory.use_hierarchy":        "0",
		"memory.limit_in_bytes":       "9223372036854771712",
		"memory.memsw.limit_in_bytes": "9223372036854771712",
	})
	k := &fakeKernel{t: t, root: root}
	cfg := v1DelegateConfig(t, root)
	res, err := delegate(cfg, k.ops())
	if err != nil {
		t.Fatalf("Delegate() error = %v", err)
	}
	if res.Path != "/sandcell-u4242" || res.Delegated != "/sandcell-u4242/runs" || res.Mode != Legacy {
		t.Errorf("Delegate() = %+v, want path /sandcell-u4242, delegated /sandcell-u4242/runs, legacy", res)
	}
	check := func(memory, pids string) {
		t.Helper()
		wantFiles(t, root, map[string]string{
			"memory/sandcell-u4242/memory.limit_in_bytes":       memory,
			"memory/sandcell-u4242/memory.memsw.limit_in_bytes": memory,
			"memory/sandcell-u4242/memory.use_hierarchy":        "1",
			"pids/sandcell-u4242/pids.max":                      pids,
		})
		owners := map[string][2]int{}
		for _, h := range []string{"memory", "pids", "cpu", "cpuacct"} {
			dir := filepath.Join(root, h, "sandcell-u4242")
			owners[h+"/sandcell-u4242"] = [2]int{0, 0}
			for _, f := range filesIn(t, dir) {
				rel, _ := filepath.Rel(root, f)
				owners[rel] = [2]int{0, 0}
			}
			runs := filepath.Join(dir, "runs")
			owners[h+"/sandcell-u4242/runs"] = [2]int{testUID, testGID}
			files := filesIn(t, runs)
			if len(files) == 0 {
				t.Fatalf("fake kernel made no files in %s", runs)
			}
			for _, f := range files {
				rel, _ := filepath.Rel(root, f)
				owners[rel] = [2]int{testUID, testGID}
			}
		}
		wantOwners(t, root, owners)
		for _, h := range []string{"freezer", "systemd"} {
			if exists(filepath.Join(root, h, "sandcell-u4242")) {
				t.Errorf("Delegate() created the cgroup in the %s hierarchy", h)
			}
		}
	}
	check("1073741824", "100")
	cfg.MemoryBytes, cfg.Pids = 512<<20, 50
	if _, err := delegate(cfg, k.ops()); err != nil {
		t.Fatalf("Delegate() again error = %v", err)
	}
	check("536870912", "50")

	// The user's server opens runs, writing nothing.
	before := snapshot(t, root)
	user := &fakeKernel{t: t, root: root, uid: testUID}
	fo := newFakeOps(root)
	ocfg := DelegatedConfig{UID: testUID, Root: root, Mode: Legacy, Logger: testLogger(t)}
	p, err := openDelegated(ocfg, user.ops(), fo.ops())
	if err != nil {
		t.Fatalf("OpenDelegated() error = %v", err)
	}
	if p.Path() != "/sandcell-u4242/runs" || !p.Delegated() {
		t.Errorf("OpenDelegated() = path %q delegated %v, want /sandcell-u4242/runs, true", p.Path(), p.Delegated())
	}
	if c := changes(before, snapshot(t, root)); len(c) > 0 {
		t.Errorf("OpenDelegated() changed %q", c)
	}
	if d := detectDelegation(ocfg, user.ops()); d.String() != "tier 2: delegated cgroup /sandcell-u4242/runs (cgroup v1)" {
		t.Errorf("DetectDelegation() = %q", d)
	}
	for _, h := range []string{"memory", "pids"} {
		writeFiles(t, filepath.Join(root, h, "sandcell-u4242", "runs", "run1"), map[string]string{"cgroup.procs": procs(300)})
	}
	if removed, err := p.RemoveStale(nil); err != nil || !reflect.DeepEqual(removed, []string{"run1"}) {
		t.Errorf("RemoveStale() = %q, %v, want [run1]", removed, err)
	}
	if err := p.Remove(); err != nil {
		t.Errorf("Remove() error = %v", err)
	}
	for _, h := range []string{"memory", "pids", "cpu", "cpuacct"} {
		if !exists(filepath.Join(root, h, "sandcell-u4242", "runs")) {
			t.Errorf("Remove() removed the delegated cgroup from the %s hierarchy", h)
		}
	}

	// Refused: another user, a user without setup, an incomplete setup.
	other := &fakeKernel{t: t, root: root, uid: 4343}
	for _, tc := range []struct {
		name string
		k    *fakeKernel
		cfg  DelegatedConfig
		want string
	}{
		{"another user's runs", other, DelegatedConfig{UID: 4343, User: "bob", Path: "/sandcell-u4242"}, "not writable"},
		{"no setup", other, DelegatedConfig{UID: 4343, User: "bob"}, "/sandcell-u4343/runs does not exist"},
	} {
		tc.cfg.Root, tc.cfg.Mode = root, Legacy
		_, err := openDelegated(tc.cfg, tc.k.ops(), fo.ops())
		if !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "`sudo sandcell setup --user bob`") {
			t.Errorf("%s: OpenDelegated() error = %v, want ErrNotDelegated saying %q and naming the setup command", tc.name, err, tc.want)
		}
	}
	if err := os.RemoveAll(filepath.Join(root, "cpuacct", "sandcell-u4242", "runs")); err != nil {
		t.Fatal(err)
	}
	if _, err := openDelegated(ocfg, user.ops(), fo.ops()); !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), "cpuacct") {
		t.Errorf("OpenDelegated() without runs in cpuacct error = %v, want ErrNotDelegated naming cpuacct", err)
	}

	// Undelegate: refused while a run holds a process, then everything goes.
	writeFiles(t, filepath.Join(root, "pids", "sandcell-u4242", "runs", "run2"), map[string]string{"cgroup.procs": procs(400)})
	if err := undelegate(cfg, fo.ops()); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "400") {
		t.Errorf("Undelegate() with a process error = %v, want ErrBusy naming pid 400", err)
	}
	if !exists(filepath.Join(root, "memory", "sandcell-u4242", "runs")) {
		t.Fatalf("a refused Undelegate() removed a cgroup")
	}
	writeFiles(t, filepath.Join(root, "pids", "sandcell-u4242", "runs", "run2"), map[string]string{"cgroup.procs": ""})
	if err := undelegate(cfg, fo.ops()); err != nil {
		t.Fatalf("Undelegate() error = %v", err)
	}
	for _, h := range []string{"memory", "pids", "cpu", "cpuacct"} {
		if exists(filepath.Join(root, h, "sandcell-u4242")) {
			t.Errorf("Undelegate() left the cgroup in the %s hierarchy", h)
		}
	}
	if err := undelegate(cfg, fo.ops()); err != nil {
		t.Errorf("Undelegate() of nothing error = %v, want nil", err)
	}
}

func TestTierString(t *testing.T) {
	for tier, want := range map[Tier]string{TierRoot: "tier 1", TierDelegated: "tier 2", TierNone: "tier 3", 0: "Tier(0)"} {
		if got := tier.String(); got != want {
			t.Errorf("Tier(%d).String() = %q, want %q", int(tier), got, want)
		}
	}
}
