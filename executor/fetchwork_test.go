package executor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFetchWorkHostile reads back a /work the program planted: a symlink
// to a host file, a FIFO (a blocking open would hang the server), a file
// past the budget, a missing file; only the regular file within the budget
// is fetched, and nothing blocks.
func TestFetchWorkHostile(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(host, []byte("host secret"), 0o600)
	os.Symlink(host, filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	os.Symlink(filepath.Dir(host), filepath.Join(dir, "d", "up"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "out.txt"), []byte("result"), 0o644)
	os.WriteFile(filepath.Join(dir, "big"), []byte(strings.Repeat("x", 100)), 0o644)
	w := &FetchWork{Phases: 1, Want: []string{"out.txt", "link", "d/up/secret", "fifo", "big", "missing"}, MaxBytes: 50}
	done := make(chan error, 1)
	go func() { done <- w.Save(dir) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Save blocked (on the FIFO?)")
	}
	got := w.Fetched()
	if len(got) != 1 || string(got["out.txt"]) != "result" {
		t.Errorf("fetched %q, want only out.txt", got)
	}
	skipped := strings.Join(w.Skipped(), "\n")
	for _, p := range []string{"link:", "d/up/secret:", "fifo:", "big:"} {
		if !strings.Contains(skipped, p) {
			t.Errorf("skipped %q does not name %s", skipped, p)
		}
	}
	if strings.Contains(skipped, "missing") {
		t.Errorf("a missing file is left out silently, as SandboxFusion does: %q", skipped)
	}
}

// TestFetchWorkPhases hands a compile phase's /work (the binary, its
// mode) to the run phase and fetches after the last phase.
func TestFetchWorkPhases(t *testing.T) {
	w := &FetchWork{Phases: 2, Want: []string{"out.txt"}, MaxBytes: 1 << 20}
	compile := t.TempDir()
	os.WriteFile(filepath.Join(compile, "main"), []byte("ELF"), 0o755)
	if err := w.Save(compile); err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	if err := w.Fill(run); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(run, "main"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("run phase's /work: main %v, %v; want the compiled file, mode 0755", fi, err)
	}
	os.WriteFile(filepath.Join(run, "out.txt"), []byte("42"), 0o644)
	if err := w.Save(run); err != nil {
		t.Fatal(err)
	}
	if got := w.Fetched(); string(got["out.txt"]) != "42" || len(got) != 1 {
		t.Errorf("fetched %q", got)
	}
}
