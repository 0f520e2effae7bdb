package limits

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestRemoveStaleV1(t *testing.T) {
	for _, mode := range []Mode{Legacy, Hybrid} {
		t.Run(mode.String(), func(t *testing.T) {
			hs := []string{"memory", "pids", "cpu", "cpuacct", "freezer", "systemd"}
			if mode == Hybrid {
				hs = append(hs, "unified")
			}
			root := fakeV1(t, hs...)
			// A co-mounted hierarchy reached through a symlink must be visited once, as its target.
			if err := os.Symlink("cpu", filepath.Join(root, "cpu,cpuacct")); err != nil {
				t.Fatal(err)
			}
			// A stray directory that is not a hierarchy (no cgroup.procs) is ignored.
			writeFiles(t, filepath.Join(root, "stray", "sandcell", "a"), map[string]string{"cgroup.procs": procs(999)})
			for _, h := range hs {
				writeFiles(t, filepath.Join(root, h, "sandcell"), map[string]string{"cgroup.procs": ""})
				// a: a stale run with two processes, and a nested cgroup with a third.
				files := map[string]string{"cgroup.procs": procs(100, 101)}
				switch h {
				case "freezer":
					files["freezer.state"] = "THAWED"
				case "unified":
					files["cgroup.freeze"] = "0"
				}
				writeFiles(t, filepath.Join(root, h, "sandcell", "a"), files)
				// b: a live run the caller keeps.
				writeFiles(t, filepath.Join(root, h, "sandcell", "b"), map[string]string{"cgroup.procs": procs(200)})
			}
			writeFiles(t, filepath.Join(root, "memory", "sandcell", "a", "sub"), map[string]string{"cgroup.procs": procs(102)})
			// c: empty leftovers in two hierarchies only, as a destroyed container leaves them.
			writeFiles(t, filepath.Join(root, "systemd", "sandcell", "c"), map[string]string{"cgroup.procs": ""})
			writeFiles(t, filepath.Join(root, "memory", "sandcell", "c"), map[string]string{"cgroup.procs": ""})
			// A file in the parent is not a child.
			writeFiles(t, filepath.Join(root, "memory", "sandcell"), map[string]string{"memory.limit_in_bytes": "1"})

			fo := newFakeOps(root)
			p := testParent(t, root, "/sandcell", mode, fo)
			removed, err := p.RemoveStale(func(id string) bool { return id == "b" })
			if err != nil {
				t.Fatalf("RemoveStale() error = %v", err)
			}
			if want := []string{"a", "c"}; !reflect.DeepEqual(removed, want) {
				t.Errorf("RemoveStale() = %q, want %q", removed, want)
			}
			if got, want := fo.killedPids(), []int{100, 101, 102}; !reflect.DeepEqual(got, want) {
				t.Errorf("killed pids = %v, want %v", got, want)
			}
			for _, pid := range []int{100, 101} {
				if !fo.frozenAtKill[pid] {
					t.Errorf("pid %d was killed while its cgroup was not frozen", pid)
				}
			}
			for _, h := range hs {
				for _, id := range []string{"a", "c"} {
					if d := filepath.Join(root, h, "sandcell", id); exists(d) {
						t.Errorf("%s still exists after RemoveStale", d)
					}
				}
				if d := filepath.Join(root, h, "sandcell", "b"); !exists(d) {
					t.Errorf("%s of a kept run was removed", d)
				}
			}
			if got := fo.removed[filepath.Join(root, "freezer", "sandcell", "a")]["freezer.state"]; got != "THAWED" {
				t.Errorf("freezer.state of a at removal = %q, want THAWED", got)
			}
			if mode == Hybrid {
				if got := fo.removed[filepath.Join(root, "unified", "sandcell", "a")]["cgroup.freeze"]; got != "0" {
					t.Errorf("unified cgroup.freeze of a at removal = %q, want 0", got)
				}
			}
			if !exists(filepath.Join(root, "stray", "sandcell", "a")) {
				t.Errorf("RemoveStale touched a directory outside the hierarchies")
			}
		})
	}
}

func TestRemoveStaleV2(t *testing.T) {
	root := fakeV2(t)
	parent := filepath.Join(root, "sandcell")
	writeFiles(t, parent, map[string]string{"cgroup.procs": "", "cgroup.subtree_control": "memory pids cpu"})
	// x: a kernel with cgroup.kill (Linux >= 5.14); the emulated kernel empties it.
	writeFiles(t, filepath.Join(parent, "x"), map[string]string{"cgroup.procs": procs(300, 301), "cgroup.kill": "", "cgroup.freeze": "0"})
	writeFiles(t, filepath.Join(parent, "x", "inner"), map[string]string{"cgroup.procs": procs(302), "cgroup.kill": "", "cgroup.freeze": "0"})
	// y: an older kernel without cgroup.kill: freeze, kill each pid, thaw.
	writeFiles(t, filepath.Join(parent, "y"), map[string]string{"cgroup.procs": procs(400, 401), "cgroup.freeze": "0"})
	// z: kept.
	writeFiles(t, filepath.Join(parent, "z"), map[string]string{"cgroup.procs": procs(500), "cgroup.kill": ""})
	emulateCgroupKill(t, root)

	fo := newFakeOps(root)
	p := testParent(t, root, "/sandcell", Unified, fo)
	p.ops.killWait = p.ops.settle // give the emulated kernel time
	removed, err := p.RemoveStale(func(id string) bool { return id == "z" })
	if err != nil {
		t.Fatalf("RemoveStale() error = %v", err)
	}
	if want := []string{"x", "y"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("RemoveStale() = %q, want %q", removed, want)
	}
	if got := fo.removed[filepath.Join(parent, "x")]["cgroup.kill"]; got != "1" {
		t.Errorf("cgroup.kill of x at removal = %q, want 1", got)
	}
	if got, want := fo.killedPids(), []int{400, 401}; !reflect.DeepEqual(got, want) {
		t.Errorf("killed pids = %v, want %v (x must be killed through cgroup.kill only)", got, want)
	}
	for _, pid := range []int{400, 401} {
		if !fo.frozenAtKill[pid] {
			t.Errorf("pid %d was killed while its cgroup was not frozen", pid)
		}
	}
	if got := fo.removed[filepath.Join(parent, "y")]["cgroup.freeze"]; got != "0" {
		t.Errorf("cgroup.freeze of y at removal = %q, want 0 (thawed)", got)
	}
	if _, ok := fo.removed[filepath.Join(parent, "x", "inner")]; !ok {
		t.Errorf("nested cgroup x/inner was not removed")
	}
	if got := readString(t, filepath.Join(parent, "z", "cgroup.kill")); got != "" {
		t.Errorf("cgroup.kill of kept z = %q, want untouched", got)
	}
	if !exists(parent) {
		t.Errorf("RemoveStale removed the parent")
	}
}

func TestRemoveStaleCgroupKillFallback(t *testing.T) {
	// cgroup.kill is written but the processes stay (no kernel here): after killWait each
	// remaining pid is killed one by one.
	root := fakeV2(t)
	writeFiles(t, filepath.Join(root, "sandcell", "x"), map[string]string{"cgroup.procs": procs(300), "cgroup.kill": ""})
	fo := newFakeOps(root)
	p := testParent(t, root, "/sandcell", Unified, fo)
	removed, err := p.RemoveStale(nil)
	if err != nil || !reflect.DeepEqual(removed, []string{"x"}) {
		t.Fatalf("RemoveStale(nil) = %q, %v; want [x], nil", removed, err)
	}
	if got := fo.removed[filepath.Join(root, "sandcell", "x")]["cgroup.kill"]; got != "1" {
		t.Errorf("cgroup.kill at removal = %q, want 1", got)
	}
	if got, want := fo.killedPids(), []int{300}; !reflect.DeepEqual(got, want) {
		t.Errorf("killed pids = %v, want %v", got, want)
	}
}

func TestRemoveStaleBusy(t *testing.T) {
	root := fakeV1(t, "memory", "pids")
	for _, h := range []string{"memory", "pids"} {
		writeFiles(t, filepath.Join(root, h, "sandcell", "stuck"), map[string]string{"cgroup.procs": procs(600)})
		writeFiles(t, filepath.Join(root, h, "sandcell", "fine"), map[string]string{"cgroup.procs": procs(700)})
	}
	// init and this process must never be signalled, whatever a cgroup lists.
	writeFiles(t, filepath.Join(root, "memory", "sandcell", "odd"), map[string]string{"cgroup.procs": procs(1, os.Getpid())})
	fo := newFakeOps(root)
	fo.alive[600] = true // survives SIGKILL (e.g. stuck in the kernel)
	p := testParent(t, root, "/sandcell", Legacy, fo)
	removed, err := p.RemoveStale(nil)
	if !isBusy(err) {
		t.Errorf("RemoveStale() error = %v, want ErrBusy", err)
	}
	if want := []string{"fine"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("RemoveStale() = %q, want %q", removed, want)
	}
	for _, pid := range fo.killedPids() {
		if pid == 1 || pid == os.Getpid() {
			t.Errorf("RemoveStale killed pid %d", pid)
		}
	}
	if !exists(filepath.Join(root, "memory", "sandcell", "stuck")) {
		t.Errorf("busy child was removed")
	}
}

func TestRemoveStaleNoParent(t *testing.T) {
	root := fakeV1(t, "memory")
	fo := newFakeOps(root)
	p := testParent(t, root, "/sandcell", Legacy, fo)
	removed, err := p.RemoveStale(nil)
	if err != nil || len(removed) != 0 {
		t.Errorf("RemoveStale() without a parent = %q, %v; want none, nil", removed, err)
	}
}

func TestRemoveChild(t *testing.T) {
	root := fakeV1(t, "memory", "pids", "systemd", "unified")
	// What a destroyed container leaves on a hybrid host: directories in name=systemd and unified.
	writeFiles(t, filepath.Join(root, "systemd", "sandcell", "done"), map[string]string{"cgroup.procs": ""})
	writeFiles(t, filepath.Join(root, "unified", "sandcell", "done"), map[string]string{"cgroup.procs": "", "cgroup.kill": ""})
	writeFiles(t, filepath.Join(root, "memory", "sandcell", "running"), map[string]string{"cgroup.procs": procs(800)})
	fo := newFakeOps(root)
	p := testParent(t, root, "/sandcell", Hybrid, fo)

	if err := p.RemoveChild("done"); err != nil {
		t.Errorf("RemoveChild(done) = %v, want nil", err)
	}
	for _, h := range []string{"systemd", "unified"} {
		if d := filepath.Join(root, h, "sandcell", "done"); exists(d) {
			t.Errorf("%s still exists after RemoveChild", d)
		}
	}
	if got := fo.removed[filepath.Join(root, "unified", "sandcell", "done")]["cgroup.kill"]; got != "" {
		t.Errorf("RemoveChild wrote cgroup.kill = %q; it must kill nothing", got)
	}
	if err := p.RemoveChild("never-existed"); err != nil {
		t.Errorf("RemoveChild(never-existed) = %v, want nil", err)
	}
	if err := p.RemoveChild("running"); !isBusy(err) {
		t.Errorf("RemoveChild(running) = %v, want ErrBusy", err)
	}
	if k := fo.killedPids(); len(k) != 0 {
		t.Errorf("RemoveChild killed %v; it must kill nothing", k)
	}
	for _, id := range []string{"", ".", "..", "../x", "a/b", "a\x00"} {
		if err := p.RemoveChild(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("RemoveChild(%q) = %v, want ErrInvalid", id, err)
		}
	}
}

func TestParentRemove(t *testing.T) {
	root := fakeV1(t, "memory", "pids", "unified")
	for _, h := range []string{"memory", "pids", "unified"} {
		writeFiles(t, filepath.Join(root, h, "sandcell"), map[string]string{"cgroup.procs": ""})
	}
	writeFiles(t, filepath.Join(root, "pids", "sandcell", "child"), map[string]string{"cgroup.procs": ""})
	fo := newFakeOps(root)
	p := testParent(t, root, "/sandcell", Hybrid, fo)
	if err := p.Remove(); err == nil {
		t.Errorf("Remove() with a child = nil, want an error")
	}
	if err := p.RemoveChild("child"); err != nil {
		t.Fatalf("RemoveChild(child) = %v", err)
	}
	if err := p.Remove(); err != nil {
		t.Errorf("Remove() = %v, want nil", err)
	}
	for _, h := range []string{"memory", "pids", "unified"} {
		if d := filepath.Join(root, h, "sandcell"); exists(d) {
			t.Errorf("%s still exists after Remove", d)
		}
	}
}

func TestChildPath(t *testing.T) {
	p := &Parent{path: "/sandcell"}
	if got, want := p.ChildPath("run-1.a_b+c"), "/sandcell/run-1.a_b+c"; got != want {
		t.Errorf("ChildPath(run-1.a_b+c) = %q, want %q", got, want)
	}
	for _, id := range []string{"", ".", "..", "../etc", "a/b", "ä"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ChildPath(%q) did not panic", id)
				}
			}()
			_ = p.ChildPath(id)
		}()
	}
}

// A kill round slower than the settle time must not report as busy the
// processes it has just killed: giving up needs a fresh read of
// cgroup.procs (seen under emulation in the cgroup v2 VM lane).
func TestRemoveStaleSlowKill(t *testing.T) {
	root := fakeV1(t, "memory", "pids")
	for _, h := range []string{"memory", "pids"} {
		writeFiles(t, filepath.Join(root, h, "sandcell", "a"), map[string]string{"cgroup.procs": procs(100, 101, 102)})
	}
	fo := newFakeOps(root)
	ops := fo.ops()
	slow := ops.kill
	ops.kill = func(pid int) error {
		time.Sleep(ops.settle / 2)
		return slow(pid)
	}
	p := testParent(t, root, "/sandcell", Legacy, fo)
	p.ops = ops
	removed, err := p.RemoveStale(nil)
	if err != nil || !reflect.DeepEqual(removed, []string{"a"}) {
		t.Errorf("RemoveStale() = %q, %v; want [a], nil", removed, err)
	}
}
