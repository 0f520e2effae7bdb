package executor

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Hermetic tests of Execute, StartKernel and Install over fake runtimes
// and a fake layer store (fake_test.go): what each sandbox was asked to
// run, with which root, environment, mounts and limits.

func lookup(t *testing.T, name string) rootfs.Language {
	t.Helper()
	l, err := rootfs.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCompileThenRun: a compiled language runs two sandboxes, the compile
// phase's /work handed to the run phase, each with its own limits.
func TestCompileThenRun(t *testing.T) {
	r := newRig(t)
	c := lookup(t, "c")
	runc := r.rts.backends["runc"]
	runc.collect = []api.File{{Path: "main", Data: []byte("ELF"), Mode: 0o755}}
	var phases []string
	var streams []string
	res, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "c", Source: []byte("int main(){}"), Args: []string{"a1"},
		Stdin: []byte("in"), Limits: api.Limits{MemoryMB: 300}, CompileLimits: &api.Limits{TimeoutMS: 20000},
		PhaseDone: func(name string, _ api.Phase) { phases = append(phases, name) },
		Output:    func(stream, _ string) { streams = append(streams, stream) }}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := runc.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d sandboxes, want a compile and a run", len(reqs))
	}
	comp, run := reqs[0], reqs[1]
	if !slices.Equal(comp.Args, c.Compile) || comp.Root != "/layers/c" || comp.Stdin != nil {
		t.Errorf("compile phase: args %q root %q stdin %q", comp.Args, comp.Root, comp.Stdin)
	}
	if len(comp.Files) != 1 || comp.Files[0].Path != "main.c" || string(comp.Files[0].Data) != "int main(){}" {
		t.Errorf("compile phase files %+v, want the source as main.c", comp.Files)
	}
	// The compile phase's limits: its own request (CompileLimits), over
	// the language's compile adjustments.
	if comp.Limits.Timeout != 20*time.Second || comp.Limits.MemoryBytes != c.CompileLimits.MemoryMB<<20 {
		t.Errorf("compile limits %+v: want the asked 20 s and the language's %d MiB", comp.Limits, c.CompileLimits.MemoryMB)
	}
	if !slices.Equal(run.Args, append(slices.Clone(c.Run), "a1")) || string(run.Stdin) != "in" || run.Root != "/layers/c" {
		t.Errorf("run phase: args %q stdin %q root %q", run.Args, run.Stdin, run.Root)
	}
	if len(run.Files) != 1 || run.Files[0].Path != "main" {
		t.Errorf("run phase files %+v, want the compile phase's outputs", run.Files)
	}
	if run.Limits.MemoryBytes != 300<<20 || run.Limits.Timeout != limits.Defaults().Timeout {
		t.Errorf("run limits %+v: want the asked 300 MiB and the default timeout", run.Limits)
	}
	if res.Compile == nil || res.Status != api.StatusOK || res.CompileFailed || res.Stdout != strings.Join(run.Args, " ") {
		t.Errorf("result %+v", res)
	}
	if !slices.Equal(phases, []string{"compile", "run"}) || !slices.Equal(streams, []string{"compile stdout", "stdout"}) {
		t.Errorf("phases %q, streams %q", phases, streams)
	}
	if !slices.Equal(r.rts.asked, []string{"runc false false"}) {
		t.Errorf("runtimes asked %q: want runc once, through the pool", r.rts.asked)
	}
}

// TestCompileFailed: a failed compile phase is the result; nothing runs.
func TestCompileFailed(t *testing.T) {
	r := newRig(t)
	runc := r.rts.backends["runc"]
	runc.script = func(req *oci.Request) (api.Phase, error) {
		return api.Phase{Status: api.StatusError, ExitCode: 1, Stderr: "main.c:1: error", Message: "the program " + api.ExitMessage(1, "")}, nil
	}
	res, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "c", Source: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CompileFailed || res.Status != api.StatusError || res.Stderr != "main.c:1: error" || len(runc.requests()) != 1 {
		t.Errorf("result %+v after %d sandboxes: want the compile phase's error and no run", res, len(runc.requests()))
	}
	if want := "compile error: the program did not run (the compiler exited with status 1)"; res.Message != want {
		t.Errorf("message %q, want %q", res.Message, want)
	}
	// A compiler killed by its limit keeps its own message.
	runc.script = func(req *oci.Request) (api.Phase, error) {
		return api.Phase{Status: api.StatusTimeout, Message: "the wall-clock limit was reached"}, nil
	}
	res, err = r.Execute(context.Background(), Request{Request: api.Request{Language: "c", Source: []byte("x")}})
	if err != nil || !res.CompileFailed || res.Message != "the wall-clock limit was reached" {
		t.Errorf("compile timeout: %+v %v", res, err)
	}
}

// TestSandcellFailed: a sandbox sandcell could not start is an
// internal_error result, not a refusal; an invalid oci request is a
// refusal.
func TestSandcellFailed(t *testing.T) {
	r := newRig(t)
	r.rts.backends["runc"].script = func(req *oci.Request) (api.Phase, error) {
		return api.Phase{}, errors.New("clone: no space left")
	}
	for _, lang := range []string{"c", "python"} {
		res, err := r.Execute(context.Background(), Request{Request: api.Request{Language: lang, Source: []byte("x")}})
		if err != nil || res.Status != api.StatusInternalError || !strings.Contains(res.Message, "no space left") {
			t.Errorf("%s: %+v %v, want an internal_error result saying why", lang, res, err)
		}
	}
	r.rts.backends["runc"].script = nil
	_, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "python", Files: []api.File{{Path: "../x"}}}})
	if !errors.Is(err, api.ErrInvalid) || !errors.Is(err, oci.ErrInvalidRequest) {
		t.Errorf("a file outside /work: %v, want oci's refusal", err)
	}
	if r.events[len(r.events)-1].Refused != "invalid" {
		t.Errorf("event %+v", r.events[len(r.events)-1])
	}
}

// TestLimitsNotes: the ceilings clamp what a request asks, each clamp a
// note of the result; a bad limit is a refusal.
func TestLimitsNotes(t *testing.T) {
	r := newRig(t)
	res, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "java", Source: []byte("x"), Limits: api.Limits{MemoryMB: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := r.rts.backends["runc"].requests()
	c := limits.Ceilings()
	if len(reqs) != 2 || reqs[1].Limits.MemoryBytes != c.MemoryBytes || reqs[0].Limits.MemoryBytes != c.MemoryBytes {
		t.Fatalf("%d sandboxes; want both phases clamped to %d", len(reqs), c.MemoryBytes)
	}
	// The run phase's and the compile phase's clamps: one note each.
	if len(res.Notes) != 2 || !strings.Contains(res.Notes[0], "memory") {
		t.Errorf("notes %q, want one clamp note per phase", res.Notes)
	}
	java := lookup(t, "java")
	if reqs[1].Limits.Pids != java.Limits.Pids {
		t.Errorf("run pids %d, want java's %d", reqs[1].Limits.Pids, java.Limits.Pids)
	}
	_, err = r.Execute(context.Background(), Request{Request: api.Request{Language: "c", Source: []byte("x"), CompileLimits: &api.Limits{MemoryMB: -1}}})
	if !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a bad compile limit: %v", err)
	}
	if _, _, err := r.CellLimits(java, api.Limits{TimeoutMS: 100, MemoryMB: 1}); err != nil {
		t.Errorf("a cell's limits ignore its memory (the kernel's): %v", err)
	}
}

// TestRefusals: what refuses a request before any sandbox starts.
func TestRefusals(t *testing.T) {
	noKernel := func(s *Settings) { s.NoKernelSandbox = "user namespaces are off" }
	for name, tc := range map[string]struct {
		edit []func(*Settings)
		req  api.Request
		want error
		text string
	}{
		"language":  {req: api.Request{Language: "klingon"}, want: rootfs.ErrUnknownLanguage},
		"none":      {req: api.Request{}, want: ErrLanguage},
		"extension": {req: api.Request{Script: "x.unknownext"}, want: ErrLanguage},
		"source":    {req: api.Request{Language: "sh", Source: make([]byte, MaxSourceBytes+1)}, want: ErrTooLarge},
		"stdin":     {req: api.Request{Language: "sh", Stdin: make([]byte, MaxStdinBytes+1)}, want: ErrTooLarge},
		"isolation": {req: api.Request{Language: "sh", Isolation: "qemu"}, want: ErrIsolation, text: "unknown isolation"},
		"gvisor":    {req: api.Request{Language: "sh", Isolation: "gvisor"}, want: ErrIsolation, text: "runsc: not found"},
		"no kernel": {edit: []func(*Settings){noKernel}, req: api.Request{Language: "sh", Isolation: "runc"}, want: ErrIsolation, text: "user namespaces are off"},
		"default":   {edit: []func(*Settings){noKernel}, req: api.Request{Language: "sh"}, want: ErrIsolation, text: "isolation runc needs user namespaces"},
		"wasm deps": {req: api.Request{Language: "ruby", Isolation: "wasm", Dependencies: []string{"x"}}, want: ErrIsolation},
		"wasm cmd":  {req: api.Request{Isolation: "wasm", Command: []string{"/bin/ls"}}, want: ErrIsolation, text: "module of /work"},
		"wasm lang": {req: api.Request{Language: "java", Isolation: "wasm"}, want: rootfs.ErrNoWasm},
		"wasm cc":   {edit: []func(*Settings){noKernel}, req: api.Request{Language: "c", Isolation: "wasm"}, want: ErrIsolation, text: "ruby"},
		"deps off":  {edit: []func(*Settings){func(s *Settings) { s.Deps.Off = true }}, req: api.Request{Language: "python", Dependencies: []string{"x"}}, want: ErrInstallsOff},
		"bad dep":   {req: api.Request{Language: "python", Dependencies: []string{"git+https://x"}}, want: rootfs.ErrInvalidRequirement, text: "dependencies: "},
		"no image":  {req: api.Request{Image: "nope"}, want: api.ErrInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, tc.edit...)
			r.rts.unavailable["gvisor"] = errUnavailable
			admitted := 0
			_, err := r.Execute(context.Background(), Request{Request: tc.req, Admit: func(context.Context) (func(), error) { admitted++; return func() {}, nil }})
			if !errors.Is(err, tc.want) || !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("%v; want %v in class api.ErrInvalid, saying %q", err, tc.want, tc.text)
			}
			for iso, b := range r.rts.backends {
				if n := len(b.requests()); n > 0 {
					t.Errorf("%d %s sandboxes of a refused request", n, iso)
				}
			}
			if admitted != 0 || len(r.events) != 1 || r.events[0].Refused != "invalid" || r.events[0].Status != "" {
				t.Errorf("admitted %d times; events %+v", admitted, r.events)
			}
		})
	}
}

// TestNotBuilt: without AutoBuild a missing layer is an error naming the
// build command; with it the layer is built first and the caller hears
// of it on the setup stream.
func TestNotBuilt(t *testing.T) {
	r := newRig(t)
	r.store.notBuilt["ruby"] = true
	_, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "ruby", Source: []byte("p 1")}})
	if !errors.Is(err, rootfs.ErrNotBuilt) || !strings.Contains(err.Error(), "rootfs build ruby") || r.events[0].Refused != "failed" {
		t.Errorf("%v (event %+v), want ErrNotBuilt naming the command", err, r.events)
	}
	r = newRig(t, func(s *Settings) { s.AutoBuild = true })
	r.store.notBuilt["ruby"] = true
	var setup []string
	res, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "ruby", Source: []byte("p 1"),
		Output: func(stream, text string) {
			if stream == StreamSetup {
				setup = append(setup, text)
			}
		}}})
	if err != nil || res.Status != api.StatusOK || !slices.Equal(r.store.ensured, []string{"ruby"}) || len(setup) != 1 || !strings.Contains(setup[0], "building the ruby layers") {
		t.Errorf("%+v %v; built %q; setup %q", res, err, r.store.ensured, setup)
	}
	if root, err := r.Root(context.Background(), lookup(t, "ruby")); err != nil || root != "/layers/ruby" {
		t.Errorf("Root: %q %v", root, err)
	}
}

// TestScriptAndCommand: a script of /work runs in place of the source;
// a command runs as given, in the sh layer.
func TestScriptAndCommand(t *testing.T) {
	r := newRig(t)
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Script: "tools/x.py", Args: []string{"-v"},
		Files: []api.File{{Path: "tools/x.py", Data: []byte("print(1)")}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Command: []string{"/bin/ls", "-l"}}, Fresh: true, Libcontainer: true}); err != nil {
		t.Fatal(err)
	}
	reqs := r.rts.backends["runc"].requests()
	if want := []string{"/usr/bin/python3", "-B", "/work/tools/x.py", "-v"}; !slices.Equal(reqs[0].Args, want) || reqs[0].Root != "/layers/python" || len(reqs[0].Files) != 1 {
		t.Errorf("script: args %q root %q files %d; want %q in python's root", reqs[0].Args, reqs[0].Root, len(reqs[0].Files), want)
	}
	if !slices.Equal(reqs[1].Args, []string{"/bin/ls", "-l"}) || reqs[1].Root != "/layers/sh" || len(reqs[1].Files) != 0 {
		t.Errorf("command: args %q root %q files %+v", reqs[1].Args, reqs[1].Root, reqs[1].Files)
	}
	if r.rts.asked[1] != "runc true true" {
		t.Errorf("fresh, libcontainer: asked %q", r.rts.asked)
	}
}

// TestEnvOneRule: every sandbox's environment is the image's, then the
// language's, then the dependency layer's, then the request's own, each
// key once, the later winning. The request's PYTHONPATH wins over the
// dependency layer's (it did not before issue #36).
func TestEnvOneRule(t *testing.T) {
	r := newRig(t)
	req := Request{Request: api.Request{Language: "python", Source: []byte("x"), Dependencies: []string{"Requests==2.31.0"},
		Env: []string{"PYTHONPATH=/work/lib", "PYTHONUNBUFFERED=0", "MINE=1"}}}
	if _, err := r.Execute(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	run := r.rts.backends["runc"].requests()
	env := run[len(run)-1].Env
	for k, want := range map[string]string{"PYTHONPATH": "/work/lib", "PYTHONUNBUFFERED": "0", "MINE": "1", "PYTHONDONTWRITEBYTECODE": "1"} {
		if v, once := envValue(env, k); v != want || !once {
			t.Errorf("%s=%q (once: %v) in %q; want %q", k, v, once, env, want)
		}
	}
	// Without the request's own, the dependency layer's PYTHONPATH holds.
	req.Env = nil
	if _, err := r.Execute(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	run = r.rts.backends["runc"].requests()
	if v, once := envValue(run[len(run)-1].Env, "PYTHONPATH"); v != rootfs.DepsDir || !once {
		t.Errorf("PYTHONPATH=%q once %v, want the dependency layer's %s", v, once, rootfs.DepsDir)
	}
	if got := mergeEnv([]string{"A=1", "B=2", "A=3"}, []string{"B=4", "C=5"}); !slices.Equal(got, []string{"A=1", "A=3", "B=4", "C=5"}) {
		t.Errorf("mergeEnv: %q", got)
	}
}

// TestDeps: a request's dependencies with the session's installed set
// are installed once, in an egress sandbox of the installer's layer, and
// mounted read-only into the run; the same set again is found, not
// installed; admission is entered once either way.
func TestDeps(t *testing.T) {
	r := newRig(t)
	var admits, releases int
	admit := func(context.Context) (func(), error) { admits++; return func() { releases++ }, nil }
	req := Request{Request: api.Request{Language: "python", Source: []byte("import requests")},
		Installed: map[string][]string{"python": {"requests==2.0", "numpy"}}, Admit: admit}
	req.Dependencies = []string{"Requests==2.31.0"}
	if _, err := r.Execute(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(r.store.installs) != 1 {
		t.Fatalf("%d installs, want 1", len(r.store.installs))
	}
	m := r.store.installs[0].Manifest
	if !slices.Equal(m.Requirements, []string{"numpy", "requests==2.31.0"}) || m.Language != "python" || m.LayerID != "sha256:python" || m.Index != "https://pypi.org/simple" {
		t.Errorf("manifest %+v: want the merged, normalised set (the new constraint wins)", m)
	}
	if in := r.store.installs[0]; in.UID != 1234 || in.GID != 1235 || in.MaxBytes != defaultDepsMaxBytes {
		t.Errorf("install owner %d:%d max %d", in.UID, in.GID, in.MaxBytes)
	}
	reqs := r.rts.backends["runc"].requests()
	if len(reqs) != 2 {
		t.Fatalf("%d sandboxes, want the install and the run", len(reqs))
	}
	inst, run := reqs[0], reqs[1]
	if inst.Egress == "" || inst.Root != "/layers/python-pip" || len(inst.Mounts) != 1 || !inst.Mounts[0].Writable || inst.Mounts[0].Destination != rootfs.DepsDir {
		t.Errorf("install sandbox: egress %q root %q mounts %+v", inst.Egress, inst.Root, inst.Mounts)
	}
	if !slices.Contains(inst.Args, "numpy") || !slices.Contains(inst.Args, "https://pypi.org/simple") {
		t.Errorf("install argv %q", inst.Args)
	}
	if len(run.Mounts) != 1 || run.Mounts[0].Writable || run.Mounts[0].Destination != rootfs.DepsDir || !strings.HasPrefix(run.Mounts[0].Source, "/deps/") {
		t.Errorf("run mounts %+v, want the layer read-only at %s", run.Mounts, rootfs.DepsDir)
	}
	if admits != 1 || releases != 1 {
		t.Errorf("admitted %d, released %d: want once for the install and the run", admits, releases)
	}
	// The same set again: found, nothing installed.
	if _, err := r.Execute(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if n := len(r.rts.backends["runc"].requests()); n != 3 || admits != 2 || releases != 2 {
		t.Errorf("%d sandboxes, %d admissions after a cached set: want one more run, admitted once", n, admits)
	}
	// A session's set alone is mounted too.
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "python", Source: []byte("x")},
		Installed: map[string][]string{"python": {"numpy"}}}); err != nil {
		t.Fatal(err)
	}
	reqs = r.rts.backends["runc"].requests()
	if last := reqs[len(reqs)-1]; len(last.Mounts) != 1 {
		t.Errorf("the session's set is not mounted: %+v", last.Mounts)
	}
	// Too many requirements in one set.
	many := make([]string, MaxRequirements+1)
	for i := range many {
		many[i] = "p" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)
	}
	_, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "python", Source: []byte("x"), Dependencies: many[:60]},
		Installed: map[string][]string{"python": many[60:]}})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d requirements: %v", len(many), err)
	}
}

// TestInstallFailed: a failed install says what the package manager
// said, and nothing runs.
func TestInstallFailed(t *testing.T) {
	r := newRig(t)
	r.rts.backends["runc"].script = func(req *oci.Request) (api.Phase, error) {
		if req.Egress != "" {
			return api.Phase{Status: api.StatusError, ExitCode: 1, Stderr: "ERROR: No matching distribution found for nope"}, nil
		}
		return api.Phase{Status: api.StatusOK}, nil
	}
	_, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "python", Source: []byte("x"), Dependencies: []string{"nope"}}})
	if err == nil || !strings.Contains(err.Error(), "No matching distribution") || !strings.Contains(err.Error(), "python-pip install of nope failed") {
		t.Errorf("%v, want the install's failure with its output", err)
	}
	if n := len(r.rts.backends["runc"].requests()); n != 1 {
		t.Errorf("%d sandboxes, want the install alone", n)
	}
	if Tail("abcdef", 3) != "...def" || Tail("ab", 3) != "ab" {
		t.Error("Tail")
	}
}

// TestInstall: install_dependencies adds to the session's set.
func TestInstall(t *testing.T) {
	r := newRig(t)
	admits := 0
	d, err := r.Install(context.Background(), InstallRequest{Language: "py", Packages: []string{"numpy"},
		Installed: map[string][]string{"python": {"pandas"}},
		Admit:     func(context.Context) (func(), error) { admits++; return func() {}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if d.Language != "python" || d.Cached || !slices.Equal(d.Manifest.Requirements, []string{"numpy", "pandas"}) || !slices.Equal(d.Env, []string{"PYTHONPATH=" + rootfs.DepsDir}) || admits != 1 {
		t.Errorf("deps %+v, admitted %d", d, admits)
	}
	d, err = r.Install(context.Background(), InstallRequest{Language: "python", Packages: []string{"pandas", "numpy"}})
	if err != nil || !d.Cached || admits != 1 {
		t.Errorf("the same set again: %+v %v", d, err)
	}
	for _, bad := range []InstallRequest{{Language: "klingon", Packages: []string{"x"}}, {Language: "sh", Packages: []string{"x"}}, {Language: "python"}} {
		if _, err := r.Install(context.Background(), bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	w := newRig(t, func(s *Settings) { s.NoKernelSandbox = "no userns" })
	if _, err := w.Install(context.Background(), InstallRequest{Language: "python", Packages: []string{"x"}}); !errors.Is(err, ErrInstallsOff) || !strings.Contains(err.Error(), "no userns") {
		t.Errorf("no kernel sandbox: %v", err)
	}
}

// TestImage: a run in an imported image: its own program, or a
// language's with the image's interpreter.
func TestImage(t *testing.T) {
	r := newRig(t)
	r.store.addImage(t, "app", rootfs.ImageConfig{Env: []string{"PATH=/usr/local/bin:/usr/bin", "APP=1", "PYTHONUNBUFFERED=image"},
		Entrypoint: []string{"/usr/local/bin/app"}, Cmd: []string{"--serve"}, WorkingDir: "/srv"}, "usr/local/bin/app", "usr/local/bin/python3", "srv/")
	r.store.addImage(t, "bare", rootfs.ImageConfig{})
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Image: "app"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Image: "app", Args: []string{"--once"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Image: "app", Language: "python", Source: []byte("x"), Env: []string{"APP=2"}}}); err != nil {
		t.Fatal(err)
	}
	reqs := r.rts.backends["runc"].requests()
	own, args, py := reqs[0], reqs[1], reqs[2]
	if !slices.Equal(own.Args, []string{"/usr/local/bin/app", "--serve"}) || own.Cwd != "/srv" || own.Root != r.store.images["app"].root || len(own.Files) != 0 {
		t.Errorf("the image's program: args %q cwd %q root %q files %d", own.Args, own.Cwd, own.Root, len(own.Files))
	}
	if !slices.Equal(args.Args, []string{"/usr/local/bin/app", "--once"}) {
		t.Errorf("the image's program with args: %q", args.Args)
	}
	if py.Args[0] != "/usr/local/bin/python3" || py.Cwd != "" || len(py.Files) != 1 {
		t.Errorf("python in the image: args %q cwd %q", py.Args, py.Cwd)
	}
	for k, want := range map[string]string{"APP": "2", "PYTHONUNBUFFERED": "1", "PATH": "/usr/local/bin:/usr/bin"} {
		if v, once := envValue(py.Env, k); v != want || !once {
			t.Errorf("%s=%q once %v in %q, want %q", k, v, once, py.Env, want)
		}
	}
	_, err := r.Execute(context.Background(), Request{Request: api.Request{Image: "bare"}})
	if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), "no Entrypoint or Cmd") {
		t.Errorf("an image without a program: %v", err)
	}
	_, err = r.Execute(context.Background(), Request{Request: api.Request{Image: "app", Language: "python", Dependencies: []string{"x"}}})
	if !errors.Is(err, ErrImage) {
		t.Errorf("dependencies in an image: %v", err)
	}
}

// TestWasm: under wasm a compiled language's compile phase runs in a runc
// sandbox of its variant's root, the module on the wasm runtime from the
// variant's own layer; an interpreted one runs on wasm alone.
func TestWasm(t *testing.T) {
	r := newRig(t, func(s *Settings) { s.AutoBuild = true })
	r.rts.backends["runc"].collect = []api.File{{Path: "main.wasm", Data: []byte("\x00asm")}}
	res, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "c", Isolation: "wasm", Source: []byte("int main(){}")}})
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	comp, run := only(t, r.rts.backends["runc"]), only(t, r.rts.backends["wasm"])
	if comp.Root != "/layers/c-wasm" || !strings.HasSuffix(comp.Args[0], "clang") {
		t.Errorf("compile phase: root %q args %q", comp.Root, comp.Args)
	}
	if run.Root != "/layers/own/c-wasm" || !slices.Equal(run.Args, []string{"/work/main.wasm"}) || len(run.Files) != 1 {
		t.Errorf("run phase: root %q args %q files %+v", run.Root, run.Args, run.Files)
	}
	if len(r.events) != 1 || r.events[0].Isolation != "wasm" || r.events[0].Language != "c" {
		t.Errorf("events %+v", r.events)
	}
	// Interpreted, on a host without a kernel sandbox, where wasm is the
	// default: no runc sandbox, no build.
	w := newRig(t, func(s *Settings) { s.NoKernelSandbox, s.Isolation, s.AutoBuild = "no userns", "wasm", true })
	if _, err := w.Execute(context.Background(), Request{Request: api.Request{Language: "ruby", Source: []byte("p 1")}}); err != nil {
		t.Fatal(err)
	}
	if run := only(t, w.rts.backends["wasm"]); run.Root != "/layers/own/ruby-wasm" || run.Args[0] != "/usr/lib/sandcell/ruby.wasm" || len(w.store.ensured) != 0 {
		t.Errorf("ruby under wasm: root %q args %q built %q", run.Root, run.Args, w.store.ensured)
	}
	// A command runs a module of the request's files.
	if _, err := w.Execute(context.Background(), Request{Request: api.Request{Command: []string{"/work/m.wasm"}, Files: []api.File{{Path: "m.wasm"}}}}); err != nil {
		t.Fatal(err)
	}
	if reqs := w.rts.backends["wasm"].requests(); reqs[1].Root != w.opts.StateDir {
		t.Errorf("a command's root %q", reqs[1].Root)
	}
	if uid, gid := w.SandboxIDs(); uid != 1234 || gid != 1235 {
		t.Errorf("SandboxIDs %d %d", uid, gid)
	}
}

// TestKernel: a kernel is planned as a run (root, dependency layer,
// environment) with its driver's argv, env and a lifetime CPU limit.
func TestKernel(t *testing.T) {
	r := newRig(t)
	admits, releases := 0, 0
	k, err := r.StartKernel(context.Background(), KernelRequest{Language: "py", Limits: api.Limits{TimeoutMS: 5, MemoryMB: 200, Pids: 20},
		Installed: map[string][]string{"python": {"numpy"}}, WorkBytes: 1 << 20,
		Admit: func(context.Context) (func(), error) { admits++; return func() { releases++ }, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.rts.kernels) != 1 {
		t.Fatalf("%d kernels started", len(r.rts.kernels))
	}
	req, driver := r.rts.kernels[0], r.rts.drivers[0]
	py := lookup(t, "python")
	want := []string{"/usr/bin/python3", "-B", oci.KernelDir + "/" + py.Kernel.Driver[0]}
	if !slices.Equal(req.Args, want) || req.Root != "/layers/python" || len(driver) != len(py.Kernel.Driver) || req.WorkBytes != 1<<20 {
		t.Errorf("kernel: args %q (want %q) root %q driver files %d", req.Args, want, req.Root, len(driver))
	}
	if v, _ := envValue(req.Env, "MPLBACKEND"); v != "module://sandcell_inline" {
		t.Errorf("kernel env %q: no driver env", req.Env)
	}
	if v, _ := envValue(req.Env, "PYTHONPATH"); v != rootfs.DepsDir || len(req.Mounts) != 1 {
		t.Errorf("kernel env %q mounts %+v: no dependency layer", req.Env, req.Mounts)
	}
	if req.Limits.CPUTime != KernelCPULifetime || req.Limits.MemoryBytes != 200<<20 || req.Limits.Pids != 20 || req.Limits.Timeout != limits.Defaults().Timeout {
		t.Errorf("kernel limits %+v", req.Limits)
	}
	if k.Language.Name != "python" || k.Limits != req.Limits || admits != 1 || releases != 1 {
		t.Errorf("started %+v; admitted %d released %d", k, admits, releases)
	}
	for name, kr := range map[string]KernelRequest{
		"gvisor":    {Language: "python", Isolation: "gvisor"},
		"no kernel": {Language: "c"},
		"unknown":   {Language: "klingon"},
		"limits":    {Language: "python", Limits: api.Limits{MemoryMB: -1}},
	} {
		if _, err := r.StartKernel(context.Background(), kr); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	busy := &api.BusyError{}
	_, err = r.StartKernel(context.Background(), KernelRequest{Language: "python", Admit: func(context.Context) (func(), error) { return nil, busy }})
	if !errors.Is(err, api.ErrBusy) || len(r.rts.kernels) != 1 {
		t.Errorf("a busy server: %v, %d kernels", err, len(r.rts.kernels))
	}
}

// TestObserve: every request is an event: its verdict or refusal, its
// language, its wall time and its wait for admission.
func TestObserve(t *testing.T) {
	r := newRig(t)
	r.clock.step = 0
	admit := func(context.Context) (func(), error) { r.clock.advance(3 * time.Second); return func() {}, nil }
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "py", Source: []byte("x")}, Admit: admit}); err != nil {
		t.Fatal(err)
	}
	busy := func(context.Context) (func(), error) { return nil, &api.BusyError{} }
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "py", Source: []byte("x")}, Admit: busy}); !errors.Is(err, api.ErrBusy) {
		t.Errorf("busy: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := func(ctx context.Context) (func(), error) { return nil, ctx.Err() }
	if _, err := r.Execute(ctx, Request{Request: api.Request{Language: "py"}, Admit: gone}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	r.Refused(api.Request{Language: "python", Isolation: "gvisor"}, &api.BusyError{})
	r.Refused(api.Request{Language: "python"}, nil) // no refusal: no event
	want := []Event{
		{Language: "python", Isolation: "runc", Status: api.StatusOK, Wall: 3 * time.Second, Queue: 3 * time.Second},
		{Language: "python", Isolation: "runc", Refused: "busy"},
		{Language: "python", Isolation: "runc", Refused: "cancelled"},
		{Language: "python", Isolation: "gvisor", Refused: "busy"},
	}
	if !slices.Equal(r.events, want) {
		t.Errorf("events\n%+v, want\n%+v", r.events, want)
	}
	if n := len(r.rts.backends["runc"].requests()); n != 1 {
		t.Errorf("%d sandboxes, want only the admitted request's", n)
	}
}

// TestNewClose: the executor needs its seams, and Close closes the
// runtimes it was given.
func TestNewClose(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a store or runtimes")
	}
	r := newRig(t)
	if err := r.Close(); err != nil || r.rts.closed != 1 {
		t.Errorf("Close: %v, runtimes closed %d times", err, r.rts.closed)
	}
	if r.Store() != Layers(r.store) {
		t.Error("Store is not the store given")
	}
}

// TestCompilerOptions: a request's compiler options go into the compile
// argv before the source file, after the catalogue's flags (a later -O
// wins), as separate arguments; the run argv is untouched.
func TestCompilerOptions(t *testing.T) {
	r := newRig(t)
	c := lookup(t, "c")
	runc := r.rts.backends["runc"]
	runc.collect = []api.File{{Path: "main", Data: []byte("ELF"), Mode: 0o755}}
	opts := []string{"-O0", "-DNAME=a b"}
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "c", Source: []byte("int main(){}"),
		CompilerOptions: opts}}); err != nil {
		t.Fatal(err)
	}
	reqs := runc.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d sandboxes, want a compile and a run", len(reqs))
	}
	at := slices.Index(c.Compile, "/work/main.c")
	want := slices.Concat(c.Compile[:at], opts, c.Compile[at:])
	if !slices.Equal(reqs[0].Args, want) || !slices.Equal(reqs[1].Args, c.Run) {
		t.Errorf("compile argv %q, run argv %q; want %q and %q", reqs[0].Args, reqs[1].Args, want, c.Run)
	}
}

// TestCompileEverySource: every source file of the request in the
// program's directory is compiled and linked with it, in the request's
// order (Piston's gcc package compiles *.cpp); headers, files of other
// extensions and of other directories are not passed to the compiler.
func TestCompileEverySource(t *testing.T) {
	for _, tc := range []struct {
		name, lang, script string
		files              []string
		want               []string // after the program, in its place in the argv
	}{
		{"c++ source", "cpp", "", []string{"util.cpp", "util.h", "more.cc", "lib/other.cpp", "notes.txt"}, []string{"/work/main.cpp", "/work/util.cpp", "/work/more.cc"}},
		{"c script", "c", "app/main.c", []string{"app/a.c", "app/a.h", "b.c"}, []string{"/work/app/main.c", "/work/app/a.c"}},
		{"go", "go", "", []string{"helper.go"}, []string{"/work/main.go", "/work/helper.go"}},
		{"java", "java", "", []string{"Helper.java"}, []string{"/work/Main.java", "/work/Helper.java"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			runc := r.rts.backends["runc"]
			req := api.Request{Language: tc.lang, Script: tc.script}
			if tc.script == "" {
				req.Source = []byte("x")
			} else {
				req.Files = append(req.Files, api.File{Path: tc.script, Data: []byte("x"), Mode: 0o644})
			}
			for _, f := range tc.files {
				req.Files = append(req.Files, api.File{Path: f, Data: []byte("y"), Mode: 0o644})
			}
			if _, err := r.Execute(context.Background(), Request{Request: req}); err != nil {
				t.Fatal(err)
			}
			comp := runc.requests()[0]
			i := slices.Index(comp.Args, tc.want[0])
			ok := i >= 0 && i+len(tc.want) <= len(comp.Args) && slices.Equal(comp.Args[i:i+len(tc.want)], tc.want)
			for _, a := range comp.Args {
				if strings.HasPrefix(a, "/work/") && path.Ext(a) != "" && !slices.Contains(tc.want, a) {
					ok = false // a header, another extension or directory
				}
			}
			if !ok {
				t.Errorf("compile argv %q, want the sources %q in the program's place and no other file", comp.Args, tc.want)
			}
		})
	}
}

// TestJavaMainClass: a Java program runs its class that declares main,
// whatever it is named (class Solution in Main.java; a package's
// qualified name), and a public class gives its source file its name
// (javac requires HelloWorld.java for public class HelloWorld): any class
// name is accepted, in a source or in a script with its fellow files.
func TestJavaMainClass(t *testing.T) {
	for _, tc := range []struct {
		name, src, script string
		file, class       string // the compiled file, the class run
	}{
		{"main", "public class Main { public static void main(String[] a) {} }", "", "/work/Main.java", "Main"},
		{"solution", "import java.util.*;\n// class Fake { static void main(String[] a) }\nclass Solution {\n  public static void main(String... args) { String s = \"class X {\"; }\n}\n", "", "/work/Main.java", "Solution"},
		{"public other name", "public class HelloWorld {\n  public static void main(String[] args) { System.out.println(\"OK\"); }\n}", "", "/work/HelloWorld.java", "HelloWorld"},
		{"helper first", "class Helper { int f() { return 1; } }\n@SuppressWarnings(\"x\") final class App { static public void main(final String[] a) { } }", "", "/work/Main.java", "App"},
		{"package", "package com.example;\n\npublic class Hello { public static void main(String[] a) {} }", "", "/work/Hello.java", "com.example.Hello"},
		{"no main", "class Lib {}", "", "/work/Main.java", "Main"},
		{"name too long", "public class " + strings.Repeat("A", 300) + " {}", "", "/work/Main.java", "Main"},
		{"text block", "class T { static String s = \"\"\"\n class Fake { public static void main(String[] a) {} }\n\"\"\"; }\nclass Real { public static void main(String[] a) {} }", "", "/work/Main.java", "Real"},
		{"script", "class Runner { public static void main(String[] a) {} }", "src/Runner2.java", "/work/src/Runner2.java", "Runner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			runc := r.rts.backends["runc"]
			req := api.Request{Language: "java", Script: tc.script}
			if tc.script == "" {
				req.Source = []byte(tc.src)
			} else {
				req.Files = []api.File{{Path: tc.script, Data: []byte(tc.src), Mode: 0o644}}
			}
			if _, err := r.Execute(context.Background(), Request{Request: req}); err != nil {
				t.Fatal(err)
			}
			reqs := runc.requests()
			comp, run := reqs[0], reqs[1]
			if !slices.Contains(comp.Args, tc.file) || run.Args[len(run.Args)-1] != tc.class {
				t.Errorf("compile %q run %q, want %s compiled and class %s run", comp.Args, run.Args, tc.file, tc.class)
			}
			if tc.script == "" && (len(comp.Files) != 1 || "/work/"+comp.Files[0].Path != tc.file) {
				t.Errorf("files %+v, want the source as %s", comp.Files, tc.file)
			}
		})
	}
}

// TestJavaPublicClassWithFiles: a source named after its public class is
// still compiled with the request's other java files.
func TestJavaPublicClassWithFiles(t *testing.T) {
	r := newRig(t)
	runc := r.rts.backends["runc"]
	req := api.Request{Language: "java", Source: []byte("public class App { public static void main(String[] a) { Helper.f(); } }"),
		Files: []api.File{{Path: "Helper.java", Data: []byte("class Helper { static void f() {} }"), Mode: 0o644}}}
	if _, err := r.Execute(context.Background(), Request{Request: req}); err != nil {
		t.Fatal(err)
	}
	comp, run := runc.requests()[0], runc.requests()[1]
	if n := len(comp.Args); n < 2 || comp.Args[n-2] != "/work/App.java" || comp.Args[n-1] != "/work/Helper.java" || run.Args[len(run.Args)-1] != "App" {
		t.Errorf("compile %q run %q, want App.java and Helper.java compiled, App run", comp.Args, run.Args)
	}
}

// TestJavaMainInFellow: a program whose file has no main runs the class
// of a fellow source that has one (Piston's CLI sends the file it was
// given last: run java Main.java -f Helper.java sends Helper.java first).
func TestJavaMainInFellow(t *testing.T) {
	r := newRig(t)
	runc := r.rts.backends["runc"]
	req := api.Request{Language: "java", Script: "Helper.java", Files: []api.File{
		{Path: "Helper.java", Data: []byte("class Helper { static int f() { return 1; } }"), Mode: 0o644},
		{Path: "Main.java", Data: []byte("public class Main { public static void main(String[] a) { Helper.f(); } }"), Mode: 0o644}}}
	if _, err := r.Execute(context.Background(), Request{Request: req}); err != nil {
		t.Fatal(err)
	}
	comp, run := runc.requests()[0], runc.requests()[1]
	if n := len(comp.Args); comp.Args[n-2] != "/work/Helper.java" || comp.Args[n-1] != "/work/Main.java" || run.Args[len(run.Args)-1] != "Main" {
		t.Errorf("compile %q run %q, want both compiled and Main run", comp.Args, run.Args)
	}
}
