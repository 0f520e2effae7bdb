package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// These tests need no root and no layer: the modules are made by
// module_test.go's encoder and given in /work.

func newTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	r, err := New(Config{StateDir: t.TempDir(), UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

func testLimits() limits.Set {
	l := limits.Defaults()
	l.Timeout, l.CPUTime = 5*time.Second, 5*time.Second
	l.OutputBytes = 64 << 10
	l.MemoryBytes = 32 << 20
	l.TmpfsBytes = 8 << 20
	return l
}

// runModule runs bin as /work/m.wasm.
func runModule(t *testing.T, r *Runtime, bin []byte, lim limits.Set) api.Phase {
	t.Helper()
	req := &oci.Request{Root: t.TempDir(), Args: []string{"/work/m.wasm"}, Limits: lim,
		Files: []api.File{{Path: "m.wasm", Data: bin}}}
	ph, err := oci.Run(context.Background(), r, req)
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, ph)
	}
	return ph
}

func TestRunVerdicts(t *testing.T) {
	r := newTestRuntime(t)
	cases := []struct {
		name    string
		bin     []byte
		lim     func(*limits.Set)
		status  api.Status
		code    int
		stdout  string
		message string
	}{
		{name: "hello", bin: testModule(writeData("hello\n"), 0, writeTo(1)), status: api.StatusOK, stdout: "hello\n"},
		{name: "stderr and exit 7", bin: testModule(writeData("oops\n"), 0, writeTo(2), exitWith(7)), status: api.StatusError, code: 7},
		{name: "trap", bin: testModule(nil, 0, trap), status: api.StatusError, code: trapExit, message: "wasm error: unreachable"},
		{name: "memory growth past the cap", bin: testModule(nil, 0, growUntilRefused), status: api.StatusMemoryLimit, code: 1,
			lim: func(l *limits.Set) { l.MemoryBytes, l.TmpfsBytes = 16<<20, 4<<20 }, message: "memory limit of 16 MiB reached"},
		{name: "the module's own maximum is not the limit", bin: testModule(nil, 4, growUntilRefused), status: api.StatusError, code: 1},
		{name: "infinite loop, wall clock", bin: testModule(nil, 0, forever()), status: api.StatusTimeout, code: 137,
			lim: func(l *limits.Set) { l.Timeout, l.CPUTime = 500*time.Millisecond, 20*time.Second }, message: "wall-clock limit of 500ms"},
		{name: "infinite loop, CPU time", bin: testModule(nil, 0, forever()), status: api.StatusTimeout, code: 137,
			lim: func(l *limits.Set) { l.Timeout, l.CPUTime = 20*time.Second, 300*time.Millisecond }, message: "CPU-time limit of 300ms"},
		{name: "output flood", bin: testModule(writeData(strings.Repeat("A", 100)), 0, forever(writeTo(1))), status: api.StatusOutputLimit, code: 137,
			message: "64 KiB per-stream limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lim := testLimits()
			if c.lim != nil {
				c.lim(&lim)
			}
			start := time.Now()
			ph := runModule(t, r, c.bin, lim)
			t.Logf("%s: %+v in %v", c.name, ph, time.Since(start))
			if ph.Status != c.status || ph.ExitCode != c.code {
				t.Fatalf("status %s exit %d, want %s exit %d (message %q, stderr %q)", ph.Status, ph.ExitCode, c.status, c.code, ph.Message, ph.Stderr)
			}
			if c.stdout != "" && ph.Stdout != c.stdout {
				t.Errorf("stdout %q, want %q", ph.Stdout, c.stdout)
			}
			if !strings.Contains(ph.Message, c.message) {
				t.Errorf("message %q lacks %q", ph.Message, c.message)
			}
			if ph.Status != api.StatusOK && ph.Status != api.StatusError && ph.Message == "" {
				t.Errorf("status %s with an empty message", ph.Status)
			}
		})
	}
	if n := r.Live(); n != 0 {
		t.Errorf("%d runs still live", n)
	}
}

func TestOutputFloodIsCapped(t *testing.T) {
	r := newTestRuntime(t)
	lim := testLimits()
	ph := runModule(t, r, testModule(writeData(strings.Repeat("B", 200)), 0, forever(writeTo(1))), lim)
	if !ph.StdoutTruncated || !strings.HasSuffix(ph.Stdout, "[sandcell: output truncated at 65536 bytes]") {
		t.Fatalf("stdout not cut at the cap: truncated %v, %d bytes", ph.StdoutTruncated, len(ph.Stdout))
	}
	if n := strings.Count(ph.Stdout, "B"); n != 65536 {
		t.Errorf("%d bytes kept, want the cap's 65536", n)
	}
}

func TestCPUTimeIsMeasured(t *testing.T) {
	r := newTestRuntime(t)
	lim := testLimits()
	lim.Timeout, lim.CPUTime = 400*time.Millisecond, 20*time.Second
	ph := runModule(t, r, testModule(nil, 0, forever()), lim)
	// A spin uses its thread's CPU (how much of the wall clock depends on
	// the machine's load: not asserted), and never more than the wall
	// clock: one thread.
	if ph.CPUTimeMS <= 0 || ph.CPUTimeMS > ph.ExecutionTimeMS+cpuPoll.Milliseconds() {
		t.Errorf("cpu_time_ms %d for a %d ms spin", ph.CPUTimeMS, ph.ExecutionTimeMS)
	}
}

func TestRefusals(t *testing.T) {
	r := newTestRuntime(t)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), "not a WebAssembly binary"},
		{"no _start", []byte("\x00asm\x01\x00\x00\x00"), "has no _start"},
		{"too large", append([]byte("\x00asm\x01\x00\x00\x00"), make([]byte, maxWorkModule)...), "more than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := &oci.Request{Root: t.TempDir(), Args: []string{"/work/m.wasm"}, Limits: testLimits(),
				Files: []api.File{{Path: "m.wasm", Data: c.data}}}
			_, err := oci.Run(context.Background(), r, req)
			if !strings.Contains(errString(err), c.want) || !isInvalid(err) {
				t.Fatalf("err %v, want an invalid-request error saying %q", err, c.want)
			}
		})
	}
	// A module outside /work is read beneath the root, and a link there
	// does not lead out of it.
	root := t.TempDir()
	os.WriteFile(filepath.Join(t.TempDir(), "x.wasm"), testModule(nil, 0), 0o644)
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "m.wasm")); err != nil {
		t.Fatal(err)
	}
	_, err := oci.Run(context.Background(), r, &oci.Request{Root: root, Args: []string{"/m.wasm"}, Limits: testLimits()})
	if !isInvalid(err) {
		t.Fatalf("a module linked out of the root: %v", err)
	}
	if n := r.Live(); n != 0 {
		t.Errorf("%d runs still live after refusals", n)
	}
	runs, _ := os.ReadDir(filepath.Join(r.dir, "runs"))
	if len(runs) != 0 {
		t.Errorf("refused runs left directories: %v", runs)
	}
}

func TestRecoverRemovesDeadInstances(t *testing.T) {
	state := t.TempDir()
	dead, err := New(Config{StateDir: state, UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	// A crash: the lock is released with the process, the directory stays.
	os.MkdirAll(filepath.Join(dead.dir, "runs", "x", "work"), 0o755)
	dead.lock.Close()
	live, err := New(Config{StateDir: state, UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	other := filepath.Join(state, "not-wasm")
	os.Mkdir(other, 0o755)
	n, err := live.Recover()
	if err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v; want 1 removed", n, err)
	}
	if _, err := os.Stat(dead.dir); !os.IsNotExist(err) {
		t.Errorf("the dead instance's directory is still there")
	}
	if _, err := os.Stat(live.dir); err != nil {
		t.Errorf("the live instance's directory is gone: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a directory that is not a wasm instance's was removed")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func isInvalid(err error) bool { return err != nil && errorsIs(err, api.ErrInvalid) }

func errorsIs(err, target error) bool { return errors.Is(err, target) }
