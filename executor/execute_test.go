package executor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/rootfs"
)

func testExecutor() *Executor {
	return &Executor{opts: Options{Settings: Settings{Defaults: limits.Defaults(), Ceilings: limits.Ceilings(), Isolation: "runc"}}, now: time.Now}
}

// TestPhaseLimits: the one place where a run's limits are decided.
func TestPhaseLimits(t *testing.T) {
	e := testExecutor()
	d, c := limits.Defaults(), limits.Ceilings()
	java, err := rootfs.Lookup("java")
	if err != nil {
		t.Fatal(err)
	}
	// The language raises the defaults (a JVM needs more threads and
	// memory); nothing asked, nothing clamped.
	got, notes, err := e.PhaseLimits(java.Limits, api.Limits{})
	if err != nil || len(notes) > 0 || got.Pids != java.Limits.Pids || got.MemoryBytes != java.Limits.MemoryMB<<20 || got.Timeout != d.Timeout {
		t.Errorf("java run phase: %+v %q %v; want pids %d, memory %d MiB, the default timeout", got, notes, err, java.Limits.Pids, java.Limits.MemoryMB)
	}
	// The request replaces a raised default, tighter or looser...
	got, _, err = e.PhaseLimits(java.Limits, api.Limits{Pids: 10, TimeoutMS: 1500})
	if err != nil || got.Pids != 10 || got.Timeout != 1500*time.Millisecond {
		t.Errorf("request over the language: %+v %v", got, err)
	}
	// ...within the ceilings, each clamp a note.
	got, notes, err = e.PhaseLimits(api.Limits{}, api.Limits{MemoryMB: 1 << 20, TimeoutMS: 1 << 40})
	if err != nil || got.MemoryBytes != c.MemoryBytes || got.Timeout != c.Timeout || len(notes) != 2 {
		t.Errorf("over the ceilings: %+v %q %v; want the ceilings and two notes", got, notes, err)
	}
	// Bad requests are refusals the caller can fix.
	for _, bad := range []api.Limits{{MemoryMB: -1}, {MemoryMB: 1}, {CPUs: 0.001}} {
		if _, _, err := e.PhaseLimits(api.Limits{}, bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("PhaseLimits(%+v) = %v, want an api.ErrInvalid refusal", bad, err)
		}
	}
}

func TestLanguage(t *testing.T) {
	e := testExecutor()
	for _, tc := range []struct {
		req  api.Request
		want string
	}{
		{api.Request{Language: "py"}, "python"},
		{api.Request{Script: "tools/x.py"}, "python"},
		{api.Request{Script: "a.js", Language: "typescript"}, "typescript"},
		{api.Request{Command: []string{"ls"}}, "sh"},
		{api.Request{Command: []string{"ls"}, Language: "python"}, "python"},
	} {
		l, err := e.language(tc.req)
		if err != nil || l.Name != tc.want {
			t.Errorf("language(%+v) = %q, %v; want %q", tc.req, l.Name, err, tc.want)
		}
	}
	for _, req := range []api.Request{{}, {Language: "klingon"}, {Script: "README"}, {Script: "x.unknownext"}} {
		if _, err := e.language(req); !errors.Is(err, api.ErrInvalid) || err.Error() == "" {
			t.Errorf("language(%+v) = %v; want a refusal with a message", req, err)
		}
	}
}

func TestScriptArgs(t *testing.T) {
	c, err := rootfs.Lookup("c")
	if err != nil {
		t.Fatal(err)
	}
	compile := scriptArgs(c, c.Compile, "src/tool.c")
	if !slices.Contains(compile, "/work/src/tool.c") || slices.Contains(compile, "/work/"+c.Source) {
		t.Errorf("c compile argv for a script: %q", compile)
	}
	run := scriptArgs(c, c.Run, "src/tool.c")
	if run[0] != "/work/tool" {
		t.Errorf("c run argv for a script: %q, want the binary named after the script", run)
	}
	if scriptArgs(c, nil, "x.c") != nil {
		t.Error("no phase stays no phase")
	}
}

// TestRefusedBeforeAnything: a refusal happens before any sandbox, build
// or admission, and says what to change.
func TestRefusedBeforeAnything(t *testing.T) {
	e := testExecutor()
	admitted := 0
	admit := func(context.Context) (func(), error) { admitted++; return func() {}, nil }
	for name, req := range map[string]Request{
		"source":    {Request: api.Request{Language: "sh", Source: make([]byte, MaxSourceBytes+1)}, Admit: admit},
		"stdin":     {Request: api.Request{Language: "sh", Stdin: make([]byte, MaxStdinBytes+1)}, Admit: admit},
		"isolation": {Request: api.Request{Language: "sh", Isolation: "qemu"}, Admit: admit},
		"limits":    {Request: api.Request{Language: "sh", Limits: api.Limits{MemoryMB: -1}}, Admit: admit},
		"language":  {Request: api.Request{Language: "nope"}, Admit: admit},
	} {
		_, err := e.Execute(context.Background(), req)
		if !errors.Is(err, api.ErrInvalid) || err.Error() == "" {
			t.Errorf("%s: %v, want a refusal in class api.ErrInvalid", name, err)
		}
		if name == "source" && !errors.Is(err, ErrTooLarge) || name == "isolation" && !strings.Contains(err.Error(), "unknown isolation") {
			t.Errorf("%s: %v: not the deciding package's sentinel or reason", name, err)
		}
	}
	if admitted != 0 {
		t.Errorf("refused requests were admitted %d times", admitted)
	}
}

func TestAdmissionOnce(t *testing.T) {
	var entered, released int
	a := &admission{admit: func(context.Context) (func(), error) {
		entered++
		return func() { released++ }, nil
	}}
	for range 3 {
		if err := a.enter(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	a.release()
	if entered != 1 || released != 1 {
		t.Errorf("entered %d, released %d; want one admission per request", entered, released)
	}
	busy := &admission{admit: func(context.Context) (func(), error) { return nil, &api.BusyError{} }}
	if err := busy.enter(context.Background()); !errors.Is(err, api.ErrBusy) {
		t.Errorf("a refused admission: %v", err)
	}
	busy.release() // nothing to release: no panic
}
