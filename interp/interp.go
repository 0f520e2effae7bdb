// Package interp runs code interpreter contexts inside live sandboxes
// (issue #43): a context is one of sandcell's kernel drivers
// (rootfs/kernels) running as a process of the sandbox, as its default
// user, in the context's directory, so that it sees the files the
// sandbox's other processes and file calls made and has the sandbox's
// limits and network policy. It speaks to the sandbox only through
// api.Sandboxes, and trusts nothing the sandbox says: replies and output
// are bounded, and a driver that breaks the protocol is killed.
//
// The plumbing of one context (see start): the driver's files are
// written as root under DriverDir/<digest>/ (a root-owned directory the
// default user cannot change); a private run directory holds a FIFO for
// the driver's replies (its fd 4), drained by a second process (cat)
// whose stdout carries them; the driver's stdin is its command channel
// (fd 3); its stdout and stderr are the cells' output, each cell's ended
// by the cell's mark. SIGINT interrupts a cell; SIGKILL ends a context.
package interp

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/rootfs"
)

// Bounds of what a context may make the host do.
const (
	// maxReply caps one reply line: the drivers cap a value's text at 1
	// MiB and a traceback at 64 KiB (as oci/backend's maxKernelReply).
	maxReply = 4 << 20
	// maxJunk is how many lines that are not the awaited reply a driver
	// may write in a row before it is killed (a cell writing to fd 4).
	maxJunk = 1000
	// maxCode caps a cell's code (sent through the driver's stdin).
	maxCode = 8 << 20
	// inputChunk is what one SendInput carries (the service's bound is
	// 1 MiB).
	inputChunk = 512 << 10
	// maxContexts caps a sandbox's contexts: each holds two processes
	// and two event streams of the sandbox's.
	maxContexts = 16
	// markWait bounds the wait for a cell's marks once its reply came:
	// the driver wrote them before the reply.
	markWait = 2 * time.Second
)

// Options configure a Manager; zero values take the defaults.
type Options struct {
	// DriverDir is where the drivers' files are written in a sandbox, as
	// root (default /var/lib/sandcell-kernel: under a root-owned
	// directory, so that the default user can neither change the files
	// nor make the directory first, as it could in /tmp).
	DriverDir string
	// RunDir holds the contexts' FIFOs and images (default
	// /tmp/.sandcell-interp), made by the default user.
	RunDir string
	// Ready bounds a driver's start (default 30s).
	Ready time.Duration
	// Grace is how long an interrupted cell has to end before its
	// context is killed (default 5s).
	Grace time.Duration
	// SendWait bounds the write of a cell to its driver (default 30s).
	SendWait time.Duration
	// MaxImageBytes bounds one image read back (default 16 MiB);
	// MaxPixels is passed to the drivers (default 4 million).
	MaxImageBytes int64
	MaxPixels     int64
	// MaxCellOutput bounds the stdout and stderr of one cell forwarded
	// (default 64 MiB): past it the cell is interrupted.
	MaxCellOutput int64
	Logger        *slog.Logger
}

func (o *Options) defaults() {
	if o.DriverDir == "" {
		o.DriverDir = "/var/lib/sandcell-kernel"
	}
	if o.RunDir == "" {
		o.RunDir = "/tmp/.sandcell-interp"
	}
	if o.Ready <= 0 {
		o.Ready = 30 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	if o.SendWait <= 0 {
		o.SendWait = 30 * time.Second
	}
	if o.MaxImageBytes <= 0 {
		o.MaxImageBytes = 16 << 20
	}
	if o.MaxPixels <= 0 {
		o.MaxPixels = 4_000_000
	}
	if o.MaxCellOutput <= 0 {
		o.MaxCellOutput = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Manager holds the contexts of every live sandbox.
type Manager struct {
	sb  api.Sandboxes
	opt Options

	mu    sync.Mutex
	boxes map[string][]*Context // sandbox id -> its contexts, in order

	drvMu sync.Mutex // one driver write at a time
}

// New makes a Manager over sb.
func New(sb api.Sandboxes, opt Options) *Manager {
	opt.defaults()
	return &Manager{sb: sb, opt: opt, boxes: map[string][]*Context{}}
}

// Languages are the context languages offered (with the drivers of
// rootfs/kernels), in order.
var Languages = []string{"python", "javascript", "bash"}

// Info is a context as the caller sees it.
type Info struct {
	ID       string
	Language string
	Cwd      string
}

// Cell is code to run and the environment variables it adds for itself.
type Cell struct {
	Code string
	Env  map[string]string
}

// Event is one thing a cell did, in order: output of Stream ("stdout",
// "stderr") as Text; a Result; the Error the cell raised; or, last, its
// ExecutionCount.
type Event struct {
	Stream         string
	Text           string
	Result         *Result
	Error          *CellError
	ExecutionCount int
}

// Result is a value or a display item of a cell: Text (the value's repr
// or a displayed text) and HTML (a python value's _repr_html_: a data
// frame's table), or an image's bytes and MIME type. Main is set for the
// cell's value (its last expression).
type Result struct {
	Text  string
	HTML  string
	Image []byte
	MIME  string
	Main  bool
}

// CellError is an error a cell raised.
type CellError struct {
	Name, Value, Traceback string
}

// Create starts a context of spec's language in sandbox id, working in
// cwd ("" the default user's home).
func (m *Manager) Create(ctx context.Context, id, language, cwd string) (Info, error) {
	return m.create(ctx, id, language, cwd, false)
}

// Default is sandbox id's default context of language, working in the
// default user's home: made on first use, then the same one on every
// call (the state a caller that names no context keeps across cells,
// as MCP's run_cell does), until it is removed.
func (m *Manager) Default(ctx context.Context, id, language string) (Info, error) {
	language = canonical(language)
	if c := m.defaultOf(id, language); c != nil {
		if _, err := m.sb.Sandbox(ctx, id); err != nil {
			m.forget(id)
			return Info{}, err
		}
		return c.info(), nil
	}
	return m.create(ctx, id, language, "", true)
}

// defaultOf is id's default context of language, or nil.
func (m *Manager) defaultOf(id, language string) *Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.boxes[id] {
		if c.dflt && c.lang.name == language {
			return c
		}
	}
	return nil
}

func (m *Manager) create(ctx context.Context, id, language, cwd string, dflt bool) (Info, error) {
	info, err := m.sb.Sandbox(ctx, id)
	if err != nil {
		return Info{}, err
	}
	lang, err := m.language(ctx, id, info, language)
	if err != nil {
		return Info{}, err
	}
	if cwd == "" {
		cwd = info.Home
	}
	if cwd == "" {
		cwd = "/"
	}
	m.mu.Lock()
	if len(m.boxes[id]) >= maxContexts {
		m.mu.Unlock()
		return Info{}, fmt.Errorf("%w: sandbox %s has %d contexts, the most: remove one", api.ErrBusy, id, maxContexts)
	}
	m.mu.Unlock()
	c := &Context{m: m, box: id, id: newID(), lang: lang, cwd: cwd, dflt: dflt, sem: make(chan struct{}, 1)}
	if err := c.start(ctx); err != nil {
		return Info{}, err
	}
	m.mu.Lock()
	if dflt {
		for _, other := range m.boxes[id] {
			if other.dflt && other.lang.name == lang.name {
				// Another call made the default first: use it, end ours.
				m.mu.Unlock()
				c.stop()
				return other.info(), nil
			}
		}
	}
	if len(m.boxes[id]) >= maxContexts { // others were made meanwhile
		m.mu.Unlock()
		c.stop()
		return Info{}, fmt.Errorf("%w: sandbox %s has %d contexts, the most: remove one", api.ErrBusy, id, maxContexts)
	}
	m.boxes[id] = append(m.boxes[id], c)
	m.mu.Unlock()
	return c.info(), nil
}

// List lists the sandbox's contexts in the order they were made.
func (m *Manager) List(ctx context.Context, id string) ([]Info, error) {
	if _, err := m.sb.Sandbox(ctx, id); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Info, 0, len(m.boxes[id]))
	for _, c := range m.boxes[id] {
		out = append(out, c.info())
	}
	return out, nil
}

// Restart restarts a context's driver: its state is lost.
func (m *Manager) Restart(ctx context.Context, id, cid string) error {
	c, err := m.find(ctx, id, cid)
	if err != nil {
		return err
	}
	if err := c.lock(ctx); err != nil {
		return err
	}
	defer c.unlock()
	c.stop()
	return c.start(ctx)
}

// Remove ends a context.
func (m *Manager) Remove(ctx context.Context, id, cid string) error {
	c, err := m.find(ctx, id, cid)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.boxes[id] = slices.DeleteFunc(m.boxes[id], func(o *Context) bool { return o == c })
	if len(m.boxes[id]) == 0 {
		delete(m.boxes, id)
	}
	m.mu.Unlock()
	// The running cell (if any) ends with its driver.
	c.stop()
	return nil
}

// Run runs a cell in a context, calling emit with each event in order;
// see Context.run.
func (m *Manager) Run(ctx context.Context, id, cid string, cell Cell, emit func(Event) error) error {
	c, err := m.find(ctx, id, cid)
	if err != nil {
		return err
	}
	return c.run(ctx, cell, emit)
}

func (m *Manager) find(ctx context.Context, id, cid string) (*Context, error) {
	if _, err := m.sb.Sandbox(ctx, id); err != nil {
		m.forget(id)
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.boxes[id] {
		if c.id == cid {
			return c, nil
		}
	}
	return nil, api.NotFound(fmt.Sprintf("no context %.80q in sandbox %s", cid, id))
}

// forget drops the contexts of a sandbox that is gone.
func (m *Manager) forget(id string) {
	m.mu.Lock()
	cs := m.boxes[id]
	delete(m.boxes, id)
	m.mu.Unlock()
	for _, c := range cs {
		c.stop()
	}
}

// lang is a context language resolved against a sandbox.
type lang struct {
	name   string // the context's language
	driver map[string][]byte
	first  string   // the driver's program file
	argv   []string // with {driver} in place
	env    map[string]string
	// words: the driver reads its commands as words (bash.sh), not JSON.
	words bool
}

// bashDriver is the bash context's driver: sandcell's own (the catalogue's
// kernels speak JSON, which a shell cannot read).
//
//go:embed bash.sh
var bashDriver []byte

// language resolves a context language for a sandbox: the catalogue's
// kernel of it, with the environment of the sandbox's own language when
// that runs the same driver (python in a python-data sandbox gets its
// MPLCONFIGDIR and thread settings).
func (m *Manager) language(ctx context.Context, id string, info api.SandboxInfo, name string) (lang, error) {
	name = canonical(name)
	offered := "offered: " + strings.Join(Languages, ", ")
	if !slices.Contains(Languages, name) {
		return lang{}, api.Invalid(fmt.Sprintf("no %.40q context in sandcell's code interpreter (%s)", name, offered))
	}
	if name == "bash" {
		// bash where the root has it, else the root's sh (busybox ash in
		// sandcell's roots): the driver is POSIX sh.
		prog := "/bin/bash"
		if _, err := m.sb.Stat(ctx, id, prog); err != nil {
			prog = "/bin/sh"
		}
		return lang{name: name, driver: map[string][]byte{"bash.sh": bashDriver}, first: "bash.sh",
			argv: []string{prog, rootfs.DriverPlaceholder}, env: map[string]string{}, words: true}, nil
	}
	l, err := rootfs.Lookup(name)
	if err != nil || l.Kernel == nil {
		return lang{}, api.Invalid(fmt.Sprintf("the catalogue has no %s kernel (%s)", name, offered))
	}
	if own, err := rootfs.Lookup(info.Language); err == nil && own.Kernel != nil && own.Kernel.Driver[0] == l.Kernel.Driver[0] {
		l = own
	}
	files, err := rootfs.KernelDriver(l)
	if err != nil {
		return lang{}, fmt.Errorf("the %s kernel's driver: %w", name, err)
	}
	prog := l.Kernel.Argv[0]
	if fi, err := m.sb.Stat(ctx, id, prog); err != nil || fi.Type == "dir" {
		what := "the template " + info.Template
		if info.Template == "" {
			what = "the server's default root"
		}
		return lang{}, api.Invalid(fmt.Sprintf("a %s context needs %s in the sandbox's root, and %s has none: pick a template with it (code-interpreter-v1 has python; a javascript template has node)", name, prog, what))
	}
	env := map[string]string{}
	for _, kv := range append(slices.Clone(l.Env), l.Kernel.Env...) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return lang{name: name, driver: files, first: l.Kernel.Driver[0], argv: l.Kernel.Argv, env: env}, nil
}

// canonical is the offered context language a catalogue name or alias
// stands for (py, js, node, python-data: the one whose kernel driver its
// kernel runs), or name itself.
func canonical(name string) string {
	if slices.Contains(Languages, name) {
		return name
	}
	l, err := rootfs.Lookup(name)
	if err != nil || l.Kernel == nil {
		return name
	}
	for _, c := range Languages {
		if o, err := rootfs.Lookup(c); err == nil && o.Kernel != nil && o.Kernel.Driver[0] == l.Kernel.Driver[0] {
			return c
		}
	}
	return name
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newMark is a cell's end mark: an OSC sequence no cell can know in
// advance (its nonce is drawn per cell), as oci/backend's kernels use.
func newMark() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "\x1b]7770;sandcell-cell-end-" + hex.EncodeToString(b[:]) + "\x07"
}

// errDead says a context's driver is gone.
var errDead = errors.New("the context's kernel is not running")
