package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Fakes of the executor's seams: runtimes that record the oci.Request
// each sandbox got and answer with a scripted api.Phase, and a layer
// store of made-up roots. With them the executor's logic runs without
// root, layers or containers.

// fakeRuntimes are the backends: one fakeBackend per isolation.
type fakeRuntimes struct {
	mu       sync.Mutex
	backends map[string]*fakeBackend
	// unavailable maps an isolation to the error Runtime gives for it.
	unavailable map[string]error
	// asked records each Runtime call: "isolation fresh direct".
	asked   []string
	kernels []*oci.Request
	drivers []map[string][]byte
	closed  int
}

func newFakeRuntimes() *fakeRuntimes {
	f := &fakeRuntimes{backends: map[string]*fakeBackend{}, unavailable: map[string]error{}}
	for _, iso := range Isolations {
		f.backends[iso] = &fakeBackend{name: iso}
	}
	return f
}

func (f *fakeRuntimes) Runtime(isolation string, fresh, direct bool) (oci.Runtime, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, fmt.Sprint(isolation, " ", fresh, " ", direct))
	if err := f.unavailable[isolation]; err != nil {
		return nil, err
	}
	return f.backends[isolation], nil
}

func (f *fakeRuntimes) StartKernel(_ context.Context, req *oci.Request, driver map[string][]byte, _ time.Duration) (oci.Kernel, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := req.Validate(); err != nil {
		return nil, err
	}
	f.kernels, f.drivers = append(f.kernels, req), append(f.drivers, driver)
	return fakeKernel{}, nil
}

// fakeKernel is a started kernel whose methods no test here calls (the
// cells' logic is tested on its parts, service's tests drive a whole one).
type fakeKernel struct{ oci.Kernel }

func (f *fakeRuntimes) SandboxIDs() (uint32, uint32) { return 1234, 1235 }

func (f *fakeRuntimes) Close() error { f.closed++; return nil }

// fakeBackend is one oci.Runtime. script answers each request (nil: ok,
// with the argv as stdout); collect are the files a phase that ends ok
// leaves in /work.
type fakeBackend struct {
	name    string
	mu      sync.Mutex
	reqs    []oci.Request
	script  func(req *oci.Request) (api.Phase, error)
	collect []api.File
}

func (b *fakeBackend) Prepare(_ context.Context, req *oci.Request) (oci.Container, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.reqs = append(b.reqs, *req)
	b.mu.Unlock()
	ph, err := api.Phase{Status: api.StatusOK, Stdout: strings.Join(req.Args, " ")}, error(nil)
	if b.script != nil {
		ph, err = b.script(req)
	}
	if err != nil {
		return nil, err
	}
	return &fakeContainer{req: req, phase: ph, collect: b.collect}, nil
}

// requests are the requests the backend got, in order.
func (b *fakeBackend) requests() []oci.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.reqs)
}

type fakeContainer struct {
	req     *oci.Request
	phase   api.Phase
	collect []api.File
}

func (c *fakeContainer) ID() string                  { return "fake" }
func (c *fakeContainer) Start(context.Context) error { return nil }
func (c *fakeContainer) Destroy() error              { return nil }
func (c *fakeContainer) Wait(context.Context) api.Phase {
	if c.req.OnOutput != nil && c.phase.Stdout != "" {
		c.req.OnOutput("stdout", c.phase.Stdout)
	}
	if c.phase.Status == api.StatusOK && c.req.Collect != nil {
		c.req.Collect(c.collect)
	}
	return c.phase
}

// fakeStore is a layer store of made-up roots under /layers; an image's
// root is a real directory (its programs are looked up there).
type fakeStore struct {
	mu       sync.Mutex
	notBuilt map[string]bool // Root refuses these (rootfs.ErrNotBuilt)
	ensured  []string
	images   map[string]fakeImage
	installs []rootfs.DepInstall
	cached   map[string]bool // dependency keys installed before
}

type fakeImage struct {
	root string
	img  rootfs.Image
}

func newFakeStore() *fakeStore {
	return &fakeStore{notBuilt: map[string]bool{}, images: map[string]fakeImage{}, cached: map[string]bool{}}
}

func (s *fakeStore) Root(lang rootfs.Language) (string, error) {
	if s.notBuilt[lang.Name] {
		return "", fmt.Errorf("%w: %s (sandcell rootfs build %s)", rootfs.ErrNotBuilt, lang.Name, lang.Name)
	}
	return "/layers/" + lang.Name, nil
}

func (s *fakeStore) Ensure(_ context.Context, lang rootfs.Language, fn func(rootfs.Progress)) (string, error) {
	s.mu.Lock()
	s.ensured = append(s.ensured, lang.Name)
	built := !s.notBuilt[lang.Name]
	s.notBuilt[lang.Name] = false
	s.mu.Unlock()
	if !built {
		fn(rootfs.Progress{Language: lang.Name, Layer: lang.Name, Step: "packages", Done: 1, Total: 1})
	}
	return "/layers/" + lang.Name, nil
}

func (s *fakeStore) OwnLayer(lang rootfs.Language) (string, error) {
	return "/layers/own/" + lang.Name, nil
}

func (s *fakeStore) ImageRoot(name string) (string, rootfs.Image, error) {
	im, ok := s.images[name]
	if !ok {
		return "", rootfs.Image{}, fmt.Errorf("%w: image %s", api.ErrInvalid, name)
	}
	return im.root, im.img, nil
}

func (s *fakeStore) StackID(lang rootfs.Language) (string, error) { return "sha256:" + lang.Name, nil }

func (s *fakeStore) InstallDependency(ctx context.Context, in rootfs.DepInstall) (string, rootfs.DepManifest, bool, error) {
	s.mu.Lock()
	s.installs = append(s.installs, in)
	cached := s.cached[in.Manifest.Key]
	s.mu.Unlock()
	root := "/deps/" + in.Manifest.Key[:12]
	if cached {
		return root, in.Manifest, true, nil
	}
	dir, err := os.MkdirTemp("", "deps-")
	if err != nil {
		return "", rootfs.DepManifest{}, false, err
	}
	defer os.RemoveAll(dir)
	if err := in.Run(ctx, dir); err != nil {
		return "", rootfs.DepManifest{}, false, err
	}
	s.mu.Lock()
	s.cached[in.Manifest.Key] = true
	s.mu.Unlock()
	return root, in.Manifest, false, nil
}

func (s *fakeStore) Status(lang rootfs.Language) (rootfs.Status, error) { return rootfs.Status{}, nil }
func (s *fakeStore) Built(lang rootfs.Language) (bool, error)           { return !s.notBuilt[lang.Name], nil }
func (s *fakeStore) Images() ([]rootfs.Image, error) {
	var ims []rootfs.Image
	for _, im := range s.images {
		ims = append(ims, im.img)
	}
	return ims, nil
}
func (s *fakeStore) Image(name string) (rootfs.Image, error) {
	_, im, err := s.ImageRoot(name)
	return im, err
}

// addImage makes an image whose root has the given executables (and
// directories: the names ending in "/").
func (s *fakeStore) addImage(t *testing.T, name string, cfg rootfs.ImageConfig, programs ...string) {
	root := t.TempDir()
	for _, p := range programs {
		host := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(host, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.images[name] = fakeImage{root: root, img: rootfs.Image{Name: name, Config: cfg}}
}

// fakeClock advances by step at each reading.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// rig is an executor over fakes.
type rig struct {
	*Executor
	rts    *fakeRuntimes
	store  *fakeStore
	events []Event
	clock  *fakeClock
}

// newRig is an executor over fakes, with the server's default settings
// (isolation runc, the default limits and ceilings); edit changes them.
func newRig(t *testing.T, edit ...func(*Settings)) *rig {
	t.Helper()
	r := &rig{rts: newFakeRuntimes(), store: newFakeStore(), clock: &fakeClock{t: time.Unix(1e9, 0)}}
	s := Settings{StateDir: t.TempDir(), Isolation: "runc", Defaults: limits.Defaults(), Ceilings: limits.Ceilings()}
	for _, f := range edit {
		f(&s)
	}
	e, err := New(Options{Settings: s, Runtimes: r.rts, Store: r.store, Now: r.clock.now,
		Observe: func(ev Event) { r.events = append(r.events, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	r.Executor = e
	return r
}

// only is the one request a backend got.
func only(t *testing.T, b *fakeBackend) oci.Request {
	t.Helper()
	reqs := b.requests()
	if len(reqs) != 1 {
		t.Fatalf("%s backend got %d requests, want 1", b.name, len(reqs))
	}
	return reqs[0]
}

// envValue is key's value in env, and whether it is there exactly once.
func envValue(env []string, key string) (string, bool) {
	var v string
	n := 0
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == key {
			v, n = val, n+1
		}
	}
	return v, n == 1
}

var errUnavailable = errors.New("runsc: not found")
