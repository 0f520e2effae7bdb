package limits

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestEnsureParentInvalid(t *testing.T) {
	root := fakeV1(t, "memory", "pids", "cpu", "cpuacct")
	tests := []struct {
		name string
		cfg  ParentConfig
	}{
		{"root path", ParentConfig{Path: "/", MemoryBytes: 1 << 30, Pids: 10}},
		{"relative path", ParentConfig{Path: "sandcell", MemoryBytes: 1 << 30, Pids: 10}},
		{"dot-dot path", ParentConfig{Path: "/a/../b", MemoryBytes: 1 << 30, Pids: 10}},
		{"trailing slash", ParentConfig{Path: "/sandcell/", MemoryBytes: 1 << 30, Pids: 10}},
		{"no memory", ParentConfig{Pids: 10}},
		{"negative pids", ParentConfig{MemoryBytes: 1 << 30, Pids: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Root, tt.cfg.Mode = root, Legacy
			if _, err := EnsureParent(tt.cfg); !errors.Is(err, ErrInvalid) {
				t.Errorf("EnsureParent(%+v) error = %v, want ErrInvalid", tt.cfg, err)
			}
		})
	}
}

func TestEnsureParentV1Fake(t *testing.T) {
	root := fakeV1(t, "memory", "pids", "cpu", "cpuacct", "systemd", "unified", "freezer")
	p, err := EnsureParent(ParentConfig{Root: root, Mode: Hybrid, MemoryBytes: 1 << 30, Pids: 100, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("EnsureParent() error = %v", err)
	}
	if p.Path() != "/sandcell" || p.Mode() != Hybrid {
		t.Errorf("EnsureParent() = path %q mode %s, want /sandcell hybrid", p.Path(), p.Mode())
	}
	if got := readString(t, filepath.Join(root, "memory", "sandcell", "memory.limit_in_bytes")); got != "1073741824" {
		t.Errorf("memory.limit_in_bytes = %q, want 1073741824", got)
	}
	if got := readString(t, filepath.Join(root, "pids", "sandcell", "pids.max")); got != "100" {
		t.Errorf("pids.max = %q, want 100", got)
	}
	for _, h := range []string{"cpu", "cpuacct"} {
		if !exists(filepath.Join(root, h, "sandcell")) {
			t.Errorf("parent not created in %s", h)
		}
	}
	for _, h := range []string{"systemd", "unified", "freezer"} {
		if exists(filepath.Join(root, h, "sandcell")) {
			t.Errorf("parent created in %s; only memory, pids, cpu, cpuacct are sandcell's to create", h)
		}
	}
	if exists(filepath.Join(root, "memory", "sandcell", "memory.memsw.limit_in_bytes")) {
		t.Errorf("memsw limit written without swap accounting")
	}
}

func TestEnsureParentV1AdoptWithSwap(t *testing.T) {
	root := fakeV1(t, "memory", "pids", "cpu", "cpuacct")
	// An existing parent, as the kernel shows it with swap accounting on.
	writeFiles(t, filepath.Join(root, "memory", "sandcell"), map[string]string{
		"cgroup.procs":                "",
		"memory.limit_in_bytes":       "9223372036854771712",
		"memory.memsw.limit_in_bytes": "9223372036854771712",
	})
	if _, err := EnsureParent(ParentConfig{Root: root, Mode: Legacy, MemoryBytes: 512 << 20, Pids: 7}); err != nil {
		t.Fatalf("EnsureParent() error = %v", err)
	}
	for file, want := range map[string]string{"memory.limit_in_bytes": "536870912", "memory.memsw.limit_in_bytes": "536870912"} {
		if got := readString(t, filepath.Join(root, "memory", "sandcell", file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
}

func TestEnsureParentV1MissingController(t *testing.T) {
	root := fakeV1(t, "memory", "cpu", "cpuacct")
	_, err := EnsureParent(ParentConfig{Root: root, Mode: Legacy, MemoryBytes: 1 << 30, Pids: 10})
	if !errors.Is(err, ErrNoCgroup) {
		t.Errorf("EnsureParent() without pids hierarchy error = %v, want ErrNoCgroup", err)
	}
	if exists(filepath.Join(root, "pids")) {
		t.Errorf("EnsureParent created a pids directory where no hierarchy is mounted")
	}
}

func TestEnsureParentV2Fake(t *testing.T) {
	root := fakeV2(t)
	// The kernel creates these files with the directory; a fake tree needs them up front.
	writeFiles(t, filepath.Join(root, "sandcell"), map[string]string{
		"cgroup.procs":           "",
		"cgroup.controllers":     "cpu memory pids",
		"cgroup.subtree_control": "",
		"memory.swap.max":        "max",
		"memory.max":             "max",
		"pids.max":               "max",
	})
	if _, err := EnsureParent(ParentConfig{Root: root, Mode: Unified, MemoryBytes: 1 << 30, Pids: 100}); err != nil {
		t.Fatalf("EnsureParent() error = %v", err)
	}
	for file, want := range map[string]string{
		"cgroup.subtree_control":          "+cpu +memory +pids",
		"sandcell/memory.max":             "1073741824",
		"sandcell/memory.swap.max":        "0",
		"sandcell/pids.max":               "100",
		"sandcell/cgroup.subtree_control": "+memory +pids +cpu",
	} {
		if got := readString(t, filepath.Join(root, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
}

func TestEnsureParentV2Errors(t *testing.T) {
	t.Run("kernel lacks pids", func(t *testing.T) {
		root := fakeV2(t)
		writeFiles(t, root, map[string]string{"cgroup.controllers": "cpu memory"})
		_, err := EnsureParent(ParentConfig{Root: root, Mode: Unified, MemoryBytes: 1 << 30, Pids: 10})
		if !errors.Is(err, ErrNoCgroup) {
			t.Errorf("EnsureParent() error = %v, want ErrNoCgroup", err)
		}
	})
	t.Run("not delegated", func(t *testing.T) {
		root := fakeV2(t)
		writeFiles(t, filepath.Join(root, "user.slice"), map[string]string{"cgroup.controllers": "cpu", "cgroup.subtree_control": ""})
		_, err := EnsureParent(ParentConfig{Root: root, Path: "/user.slice/sandcell", Mode: Unified, MemoryBytes: 1 << 30, Pids: 10})
		if !errors.Is(err, ErrNotDelegated) {
			t.Errorf("EnsureParent() error = %v, want ErrNotDelegated", err)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		_, err := EnsureParent(ParentConfig{Root: t.TempDir(), Mode: Unavailable, MemoryBytes: 1 << 30, Pids: 10})
		if !errors.Is(err, ErrNoCgroup) {
			t.Errorf("EnsureParent() error = %v, want ErrNoCgroup", err)
		}
	})
}
