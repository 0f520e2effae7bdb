package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// fakeLive is an oci.LiveRuntime that records what it was asked and
// starts sandboxes that do nothing (service's tests drive whole ones).
type fakeLive struct {
	mu    sync.Mutex
	reqs  []oci.Request
	opts  []oci.SandboxOptions
	err   error
	calls []string
}

type fakeLiveSandbox struct {
	oci.Sandbox
	id    string
	calls *[]string // Pause, Resume, Destroy as called
}

func (s fakeLiveSandbox) ID() string { return s.id }

func (s fakeLiveSandbox) call(name string) error {
	if s.calls != nil {
		*s.calls = append(*s.calls, name)
	}
	return nil
}

func (s fakeLiveSandbox) Pause() error   { return s.call("pause") }
func (s fakeLiveSandbox) Resume() error  { return s.call("resume") }
func (s fakeLiveSandbox) Destroy() error { return s.call("destroy") }

func (f *fakeLive) StartSandbox(_ context.Context, req *oci.Request, opts oci.SandboxOptions) (oci.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.reqs, f.opts = append(f.reqs, *req), append(f.opts, opts)
	return fakeLiveSandbox{id: opts.ID, calls: &f.calls}, nil
}

func liveRig(t *testing.T, edit ...func(*Settings)) (*rig, *fakeLive) {
	r := newRig(t, edit...)
	f := &fakeLive{}
	r.Executor.opts.Sandboxes = f
	return r, f
}

// A sandbox is planned as a run: the language's root and environment,
// the caller's env last, limits for its whole life without a wall clock
// or CPU-time limit, admitted once; the backend gets the options as given.
func TestStartSandboxPlan(t *testing.T) {
	r, f := liveRig(t)
	admitted, released := 0, 0
	sb, err := r.StartSandbox(context.Background(), SandboxRequest{Template: "py", Env: []string{"A=1", "PATH=/mine"},
		Limits: api.Limits{MemoryMB: 512, TimeoutMS: 5000, CPUTimeMS: 5000},
		ID:     "sbx", UpperDir: "/up", DiskBytes: 1 << 30, User: "user", Home: "/home/user",
		Admit: func(context.Context) (func(), error) { admitted++; return func() { released++ }, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Template != "python" || sb.Language.Name != "python" || sb.Image != "" || sb.ID() != "sbx" {
		t.Errorf("started %q language %q image %q id %q, want python, python, no image, sbx", sb.Template, sb.Language.Name, sb.Image, sb.ID())
	}
	if admitted != 1 || released != 1 {
		t.Errorf("admitted %d released %d, want 1 1", admitted, released)
	}
	if len(f.reqs) != 1 {
		t.Fatalf("backend got %d sandboxes", len(f.reqs))
	}
	req, opts := f.reqs[0], f.opts[0]
	if req.Root != "/layers/python" || len(req.Args) != 0 {
		t.Errorf("root %q args %q, want /layers/python and no program", req.Root, req.Args)
	}
	if v, once := envValue(req.Env, "PATH"); v != "/mine" || !once {
		t.Errorf("PATH = %q (once: %v), want the caller's", v, once)
	}
	if v, _ := envValue(req.Env, "A"); v != "1" {
		t.Errorf("A = %q", v)
	}
	if req.Limits.Timeout != SandboxCPULifetime || req.Limits.CPUTime != SandboxCPULifetime || req.Limits.MemoryBytes != 512<<20 {
		t.Errorf("limits %+v: want no wall clock, no CPU time, 512 MiB", req.Limits)
	}
	if !slices.Equal(sb.Own, []string{"A=1", "PATH=/mine"}) {
		t.Errorf("the caller's env: %q", sb.Own)
	}
	if sb.Limits != req.Limits {
		t.Errorf("started with %+v, backend got %+v", sb.Limits, req.Limits)
	}
	if opts != (oci.SandboxOptions{ID: "sbx", UpperDir: "/up", DiskBytes: 1 << 30, User: "user", Home: "/home/user"}) {
		t.Errorf("options %+v", opts)
	}
}

// Templates: "" is the sh root; an image's name its root; a language and
// an image given without a template; an unknown one names what exists.
func TestStartSandboxTemplates(t *testing.T) {
	r, f := liveRig(t)
	r.store.addImage(t, "web", rootfs.ImageConfig{Env: []string{"IMG=1"}}, "bin/sh")
	ctx := context.Background()
	sb, err := r.StartSandbox(ctx, SandboxRequest{})
	if err != nil || sb.Template != DefaultTemplate || f.reqs[0].Root != "/layers/sh" {
		t.Fatalf("default: %v, %+v", err, sb)
	}
	sb, err = r.StartSandbox(ctx, SandboxRequest{Template: "web"})
	if err != nil || sb.Template != "web" || sb.Image != "web" || f.reqs[1].Root != r.store.images["web"].root {
		t.Fatalf("image: %v, %+v", err, sb)
	}
	if v, _ := envValue(f.reqs[1].Env, "IMG"); v != "1" {
		t.Errorf("the image's env is missing: %q", f.reqs[1].Env)
	}
	if sb, err = r.StartSandbox(ctx, SandboxRequest{Image: "web"}); err != nil || sb.Template != "web" {
		t.Fatalf("image field: %v, %+v", err, sb)
	}
	if sb, err = r.StartSandbox(ctx, SandboxRequest{Language: "js"}); err != nil || sb.Template != "javascript" {
		t.Fatalf("language field: %v, %+v", err, sb)
	}
	if sb, err = r.StartSandbox(ctx, SandboxRequest{Template: "web", Language: "python"}); err != nil || sb.Language.Name != "python" || sb.Image != "web" {
		t.Fatalf("a language in an image: %v, %+v", err, sb)
	}
	for _, c := range []struct {
		req  SandboxRequest
		want []string
	}{
		{SandboxRequest{Template: "nosuch"}, []string{`unknown template "nosuch"`, "python", "web"}},
		{SandboxRequest{Template: "python", Language: "javascript"}, []string{"language python", `"javascript" is another`}},
		{SandboxRequest{Template: "web", Image: "other"}, []string{"is an image", `"other" is another`}},
		{SandboxRequest{Language: "nosuch"}, []string{"nosuch"}},
		{SandboxRequest{Template: "web", Language: "nosuch"}, []string{"nosuch"}},
	} {
		_, err := r.StartSandbox(ctx, c.req)
		if !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%+v: %v, want a refusal", c.req, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q does not say %q", c.req, err, w)
			}
		}
	}
}

// Refusals: no backend, the server without a kernel sandbox, the
// gate's answer, limits past the ceilings; a backend's failure is
// passed on as it is.
func TestStartSandboxRefusals(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, err := r.StartSandbox(ctx, SandboxRequest{}); !errors.Is(err, ErrNoSandboxes) ||
		!strings.Contains(err.Error(), "live sandboxes are not available on this server: ") {
		t.Errorf("no backend: %v", err)
	}
	r, _ = liveRig(t, func(s *Settings) { s.NoKernelSandbox = "user namespaces are off" })
	if _, err := r.StartSandbox(ctx, SandboxRequest{}); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "user namespaces are off") {
		t.Errorf("no kernel sandbox: %v", err)
	}
	r, f := liveRig(t)
	busy := fmt.Errorf("%w: full", api.ErrBusy)
	if _, err := r.StartSandbox(ctx, SandboxRequest{Admit: func(context.Context) (func(), error) { return nil, busy }}); !errors.Is(err, api.ErrBusy) {
		t.Errorf("gate: %v", err)
	}
	if _, err := r.StartSandbox(ctx, SandboxRequest{Limits: api.Limits{MemoryMB: -1}}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("bad limits: %v", err)
	}
	if len(f.reqs) != 0 {
		t.Errorf("refused requests reached the backend: %d", len(f.reqs))
	}
	f.err = errors.New("cgroup: no space")
	if _, err := r.StartSandbox(ctx, SandboxRequest{}); err == nil || !strings.Contains(err.Error(), "cgroup: no space") {
		t.Errorf("backend failure: %v", err)
	}
}

// A process's environment: the sandbox's, the user's, the process's own
// last, no key twice.
func TestSandboxProcessEnv(t *testing.T) {
	sb := &StartedSandbox{Env: []string{"PATH=/bin", "HOME=/nowhere", "A=1", "LOGNAME=mine"}, Own: []string{"LOGNAME=mine"}}
	env := sb.ProcessEnv("user", "/home/user", []string{"A=2", "USER=me"})
	for k, want := range map[string]string{"PATH": "/bin", "HOME": "/home/user", "A": "2", "USER": "me", "LOGNAME": "mine"} {
		if v, once := envValue(env, k); v != want || !once {
			t.Errorf("%s = %q (once: %v), want %q in %q", k, v, once, want, env)
		}
	}
}

// A sandbox's network policy is narrowed to the server's ceiling for its
// language as a run's (refused past it, before the backend), and the
// backend gets a gateway that lives as long as the sandbox: paused,
// resumed and closed with it; its log is the sandbox's. Without a policy
// it gets none.
func TestStartSandboxNetwork(t *testing.T) {
	ctx := context.Background()
	r, f := liveRig(t, func(s *Settings) { s.Network.Allow = map[string][]string{"python": {"git.test"}} })
	for _, c := range []struct {
		req  SandboxRequest
		want string
	}{
		{SandboxRequest{Template: "python", Network: &api.Network{Allow: []string{"evil.test"}}}, "outside the server's allowlist"},
		{SandboxRequest{Template: "sh", Network: &api.Network{Allow: []string{"git.test"}}}, "allows sh programs no network"},
	} {
		if _, err := r.StartSandbox(ctx, c.req); !errors.Is(err, ErrNetwork) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.req.Network, err, c.want)
		}
	}
	if len(f.reqs) != 0 {
		t.Fatalf("refused sandboxes reached the backend: %d", len(f.reqs))
	}
	sb, err := r.StartSandbox(ctx, SandboxRequest{Template: "python", Network: &api.Network{Allow: []string{"git.test:443"}}})
	if err != nil {
		t.Fatal(err)
	}
	if f.reqs[0].Network == nil || sb.NetworkLog == nil {
		t.Fatalf("backend gateway %v, log reader %t: want both", f.reqs[0].Network, sb.NetworkLog != nil)
	}
	for _, op := range []func() error{sb.Pause, sb.Resume, sb.Destroy} {
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(f.calls, []string{"pause", "resume", "destroy"}) {
		t.Errorf("the backend's sandbox saw %q", f.calls)
	}
	plain, err := r.StartSandbox(ctx, SandboxRequest{Template: "python"})
	if err != nil || f.reqs[1].Network != nil || plain.NetworkLog != nil {
		t.Errorf("without a policy: %v, gateway %v, log reader %t", err, f.reqs[1].Network, plain.NetworkLog != nil)
	}
}
