package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	wapi "github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	wsys "github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/owner"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// Config configures the wasm runtime. The zero value of a field means what
// its comment says.
type Config struct {
	// StateDir holds the instance's directory (StateDir/<instance>: a lock
	// and each run's /work and /tmp); the same directory as the runc
	// runtime's is fine: instances are told apart by their lock, and
	// Recover (this one's or oci's) removes the dead ones'.
	StateDir string
	// CacheDir keeps compiled modules across processes (wazero's file
	// cache, by module hash and wazero version). It must be this user's
	// alone (the caller checks): the machine code there is run as it is,
	// so a directory another user could write would let them plant code.
	// "": in memory only.
	CacheDir string
	// UID and GID own what a run creates in /work, so that a session's
	// later runc runs (as the sandbox user) can change it; -1: this
	// process's ids.
	UID, GID int
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Caps on a module, so that a hostile /work cannot make the compiler (in
// this process, unsandboxed) use unbounded memory and time: the optimizing
// compiler needs about 20 times a module's size in memory (measured: 590
// MB for ruby.wasm's 30 MB). A module of a language's layer (ruby.wasm) is
// the catalogue's and may be larger.
const (
	maxWorkModule  = 16 << 20
	maxLayerModule = 128 << 20
)

// keepModules is how many compiled modules stay in memory between runs
// (the least recently used is dropped first); each costs its machine code.
const keepModules = 16

// instanceMarker, in an instance directory, says it is a wasm runtime's:
// Recover removes only those (and the lock decides whether it is dead).
const instanceMarker = "wasm"

// Runtime runs each request as a WebAssembly module (WASI preview 1) in
// this process, on wazero: no kernel feature is needed (no namespace, no
// cgroup, no seccomp), so it runs where user namespaces are refused. It
// implements oci.Runtime: the executor's compile-and-run phases are the
// same for every backend.
type Runtime struct {
	cfg      Config
	log      *slog.Logger
	instance string
	dir      string
	lock     *os.File
	seq      atomic.Uint64
	cache    wazero.CompilationCache
	keep     *moduleKeeper

	mu   sync.Mutex
	live map[string]*container
}

// New creates a runtime instance and its locked state directory.
func New(cfg Config) (*Runtime, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("%w: no state directory", ErrRuntime)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Named like oci's instances (owner.NewName), which share the state
	// directory: any recovery can tell from the name that its owner
	// lives, before this one has locked its directory (issue #17).
	name, err := owner.NewName()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	r := &Runtime{cfg: cfg, log: log, instance: name, live: map[string]*container{}}
	r.dir = filepath.Join(cfg.StateDir, r.instance)
	for _, d := range []string{cfg.StateDir, r.dir, filepath.Join(r.dir, "runs")} {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%w: create state dir: %w", ErrRuntime, err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(r.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: lock %s: %w", ErrRuntime, r.dir, err)
	}
	r.lock = lock
	if err := os.WriteFile(filepath.Join(r.dir, instanceMarker), nil, 0o600); err != nil {
		r.Close()
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	r.cache = wazero.NewCompilationCache()
	if cfg.CacheDir != "" {
		if c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			log.Warn("compiled wasm modules are kept in memory only", "cache_dir", cfg.CacheDir, "err", err)
		} else {
			r.cache = c
		}
	}
	r.keep = newModuleKeeper(r.cache)
	return r, nil
}

// Recover removes what dead wasm instances left in StateDir (runs' /work
// and /tmp of a killed server): only an instance whose lock nobody holds
// and whose name does not say its owner lives (owner.NameOwner). It
// returns how many instances it removed.
func (r *Runtime) Recover() (int, error) {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || e.Name() == r.instance {
			continue
		}
		dir := filepath.Join(r.cfg.StateDir, e.Name())
		if _, err := os.Lstat(filepath.Join(dir, instanceMarker)); err != nil {
			continue // not a wasm instance (a runc one: oci's Recover)
		}
		if tok, ok := owner.NameOwner(e.Name()); ok && !tok.Dead() {
			continue // alive, maybe not locked yet
		}
		lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
		if err == nil {
			busy := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
			if busy {
				lock.Close()
				continue
			}
		}
		// RemoveAll follows no symlink the dead runs' modules planted.
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		} else {
			n++
		}
		if lock != nil {
			lock.Close()
		}
	}
	return n, errors.Join(errs...)
}

// Close ends every run still alive and removes the instance's directory.
func (r *Runtime) Close() error {
	r.mu.Lock()
	live := make([]*container, 0, len(r.live))
	for _, c := range r.live {
		live = append(live, c)
	}
	r.mu.Unlock()
	for _, c := range live {
		_ = c.Destroy()
	}
	r.keep.close()
	err := os.RemoveAll(r.dir)
	if r.lock != nil {
		r.lock.Close()
	}
	return err
}

// Live is how many runs exist right now.
func (r *Runtime) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// Enforced says how each limit of a wasm run holds (the result's
// limits_enforced). cpus is missing: a module has one thread, at most one
// CPU, and no share of it is enforced.
func Enforced() map[string]string {
	return map[string]string{
		"timeout":    "wall clock",
		"cpu_time":   "thread CPU clock",
		"output":     "capture cap",
		"tmpfs":      "sandcell quota of /work and /tmp",
		"file_size":  "sandcell file size cap",
		"open_files": "sandcell descriptor cap",
		"memory":     "linear memory cap",
		"pids":       "no processes (WASI has none)",
	}
}

// Prepare validates the request, makes the run's /work (filled) and /tmp
// directories and compiles its module; the program has not started.
func (r *Runtime) Prepare(ctx context.Context, req *oci.Request) (oci.Container, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if req.Egress != "" || req.Network != nil || len(req.Mounts) > 0 {
		return nil, fmt.Errorf("%w: isolation wasm has no network and mounts no dependency layers", oci.ErrInvalidRequest)
	}
	c, err := r.prepare(ctx, req)
	if err != nil {
		return nil, err // not a nil *container in a non-nil Container
	}
	return c, nil
}

func (r *Runtime) prepare(ctx context.Context, req *oci.Request) (_ *container, retErr error) {
	id := r.instance + "-" + strconv.FormatUint(r.seq.Add(1), 10)
	c := &container{id: id, rt: r, req: req, lim: req.Limits, runDir: filepath.Join(r.dir, "runs", id),
		stop: make(chan oci.StopReason, 1), exited: make(chan struct{}), workspace: req.Workspace}
	r.mu.Lock()
	r.live[id] = c
	r.mu.Unlock()
	defer func() {
		if retErr != nil {
			_ = c.Destroy()
		}
	}()
	uid, gid := r.ids()
	work, tmp := filepath.Join(c.runDir, "work"), filepath.Join(c.runDir, "tmp")
	for _, d := range []string{c.runDir, work, tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
		}
	}
	if r.cfg.UID >= 0 {
		for _, d := range []string{work, tmp} {
			if err := os.Lchown(d, uid, gid); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
			}
		}
	}
	c.work = work
	if err := oci.FillWork(work, req, uint32(uid), uint32(gid)); err != nil {
		return nil, err
	}
	c.filled = req.Workspace != nil
	fds := &fdBudget{max: max(int(req.Limits.OpenFiles)-6, 1)} // less stdio and the three preopens
	workBytes := req.WorkBytes
	if workBytes <= 0 {
		workBytes = req.Limits.TmpfsBytes
	}
	var err error
	if c.workFS, err = newDirFS(work, workBytes, inodeCap(workBytes), req.Limits.FileBytes, fds, uid, gid); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	if c.tmpFS, err = newDirFS(tmp, req.Limits.TmpfsBytes, inodeCap(req.Limits.TmpfsBytes), req.Limits.FileBytes, fds, uid, gid); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	bin, err := r.module(req, c.workFS.root)
	if err != nil {
		return nil, err
	}
	c.wrt = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCompilationCache(r.cache).
		WithCloseOnContextDone(true).
		WithCustomSections(false))
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, c.wrt); err != nil {
		return nil, fmt.Errorf("%w: WASI: %w", ErrRuntime, err)
	}
	if c.cm, err = r.keep.compile(ctx, c.wrt, bin); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrModule, req.Args[0], err)
	}
	if err := stubImports(ctx, c.wrt, c.cm); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrModule, req.Args[0], err)
	}
	switch {
	case c.cm.ExportedFunctions()["_start"] != nil:
		c.kind = kindCommand
	case isRubyReactor(c.cm.ExportedFunctions()):
		c.kind = kindRuby
		if len(req.Args) < 2 {
			return nil, fmt.Errorf("%w: ruby.wasm needs a script to run (argv: MODULE SCRIPT ARGS...)", oci.ErrInvalidRequest)
		}
	default:
		return nil, fmt.Errorf("%w: %s has no _start (it is not a WASI command) and is not a reactor sandcell knows", ErrModule, req.Args[0])
	}
	return c, nil
}

// ids are the owner of the run's new entries.
func (r *Runtime) ids() (int, int) {
	if r.cfg.UID < 0 {
		return os.Getuid(), os.Getgid()
	}
	return r.cfg.UID, r.cfg.GID
}

// inodeCap bounds the entries of a run directory of size bytes, as
// oci's tmpfs cap does: one per 4 KiB, at least 8192.
func inodeCap(size int64) int64 { return max(size/4096, 8192) }

// module reads the run's module, argv[0]: from /work (the program's own,
// through its os.Root: no link leads out) or from the language's root
// (Request.Root, beneath it), capped in size.
func (r *Runtime) module(req *oci.Request, work *os.Root) ([]byte, error) {
	name := path.Clean(req.Args[0])
	var f *os.File
	var err error
	limit := int64(maxLayerModule)
	if rest, ok := strings.CutPrefix(name, "/work/"); ok {
		limit = maxWorkModule
		f, err = work.OpenFile(rest, os.O_RDONLY|unix.O_NONBLOCK, 0)
	} else {
		var root *os.Root
		if root, err = os.OpenRoot(req.Root); err == nil {
			f, err = root.OpenFile(strings.TrimPrefix(name, "/"), os.O_RDONLY|unix.O_NONBLOCK, 0)
			root.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrModule, req.Args[0], err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrModule, req.Args[0])
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d a module may have", ErrModule, req.Args[0], fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrRuntime, req.Args[0], err)
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		return nil, fmt.Errorf("%w: %s is not a WebAssembly binary", ErrModule, req.Args[0])
	}
	return b, nil
}

// stubImports gives the module the functions it imports from modules
// other than WASI as stubs that trap when called: ruby.wasm imports its
// JavaScript host's (see ruby.go) and never calls them unless a script
// asks for JavaScript. Imported memories, tables and globals cannot be
// stubbed: such a module is refused.
func stubImports(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule) error {
	if m := cm.ImportedMemories(); len(m) > 0 {
		mod, name, _ := m[0].Import()
		return fmt.Errorf("it imports the memory %s.%s, which sandcell does not provide", mod, name)
	}
	builders := map[string]wazero.HostModuleBuilder{}
	var order []string
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod == wasi_snapshot_preview1.ModuleName {
			continue
		}
		b := builders[mod]
		if b == nil {
			b = rt.NewHostModuleBuilder(mod)
			builders[mod] = b
			order = append(order, mod)
		}
		what := mod + "." + name
		if i := strings.IndexByte(what, ':'); i > 0 {
			what = what[:i]
		}
		b.NewFunctionBuilder().WithGoModuleFunction(wapi.GoModuleFunc(func(context.Context, wapi.Module, []uint64) {
			panic(fmt.Errorf("%s is not provided: sandcell gives a module WASI preview 1 only", what))
		}), f.ParamTypes(), f.ResultTypes()).Export(name)
	}
	for _, mod := range order {
		if _, err := builders[mod].Instantiate(ctx); err != nil {
			return err
		}
	}
	return nil
}

// moduleKeeper keeps compiled modules by content hash (SHA-256) between
// runs. Every run has its own wazero runtime (its namespace, WASI, memory
// limit), all of them sharing one compilation cache and so one engine,
// which holds a module's machine code while some compiled module of it is
// open: the keeper's own runtime holds one for each of the last
// keepModules modules, so that a run of a kept module only decodes it.
type moduleKeeper struct {
	rt wazero.Runtime

	mu    sync.Mutex
	kept  map[[32]byte]*kept
	clock uint64
}

type kept struct {
	ready chan struct{}
	cm    wazero.CompiledModule
	err   error
	used  uint64
}

func newModuleKeeper(cache wazero.CompilationCache) *moduleKeeper {
	rt := wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfig().WithCompilationCache(cache).WithCloseOnContextDone(true).WithCustomSections(false))
	return &moduleKeeper{rt: rt, kept: map[[32]byte]*kept{}}
}

// compile compiles bin in rt, compiling it once (in the keeper) for every
// runtime that asks for the same bytes.
func (k *moduleKeeper) compile(ctx context.Context, rt wazero.Runtime, bin []byte) (wazero.CompiledModule, error) {
	sum := sha256.Sum256(bin)
	k.mu.Lock()
	e, ok := k.kept[sum]
	k.clock++
	if !ok {
		e = &kept{ready: make(chan struct{})}
		k.kept[sum] = e
		k.evict()
	}
	e.used = k.clock
	k.mu.Unlock()
	if !ok {
		e.cm, e.err = k.rt.CompileModule(context.WithoutCancel(ctx), bin)
		close(e.ready)
		if e.err != nil {
			k.mu.Lock()
			delete(k.kept, sum)
			k.mu.Unlock()
		}
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e.err != nil {
		return nil, e.err
	}
	return rt.CompileModule(ctx, bin) // the engine has it: decode only
}

// evict drops the least recently used modules past keepModules.
// Preconditions: k.mu held.
func (k *moduleKeeper) evict() {
	for len(k.kept) > keepModules {
		var oldest [32]byte
		var at uint64 = ^uint64(0)
		for sum, e := range k.kept {
			select {
			case <-e.ready:
			default:
				continue // being compiled
			}
			if e.used < at {
				oldest, at = sum, e.used
			}
		}
		e := k.kept[oldest]
		if e == nil {
			return
		}
		delete(k.kept, oldest)
		if e.cm != nil {
			_ = e.cm.Close(context.Background())
		}
	}
}

func (k *moduleKeeper) close() {
	_ = k.rt.Close(context.Background())
}

// Kinds of modules.
const (
	kindCommand = iota + 1 // a WASI command: _start
	kindRuby               // ruby.wasm's reactor (ruby.go)
)

// container is one wasm run, used once.
type container struct {
	id        string
	rt        *Runtime
	req       *oci.Request
	lim       limits.Set
	runDir    string
	work      string
	workFS    *dirFS
	tmpFS     *dirFS
	wrt       wazero.Runtime
	cm        wazero.CompiledModule
	kind      int
	workspace oci.Workspace
	filled    bool

	stdout, stderr *oci.Output
	alloc          *allocator
	cancel         context.CancelFunc
	stop           chan oci.StopReason
	started        time.Time

	// Set by the run's goroutine before exited is closed.
	exited  chan struct{}
	clock   int32 // the run's thread's CPU clock; 0 before it runs
	clockMu sync.Mutex
	cpu0    time.Duration
	cpu     time.Duration
	ended   time.Time
	result  error // what the module's run returned

	destroyOnce sync.Once
	destroyErr  error
}

func (c *container) ID() string { return c.id }

func (c *container) requestStop(s oci.StopReason) {
	select {
	case c.stop <- s:
	default:
	}
}

// Start runs the module on its own goroutine. The wall clock counts from
// here.
func (c *container) Start(ctx context.Context) error {
	if c.wrt == nil {
		return oci.ErrDestroyed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	emit := func(stream string) func(string) {
		if c.req.OnOutput == nil {
			return nil
		}
		return func(text string) { c.req.OnOutput(stream, text) }
	}
	over := func() { c.requestStop(oci.StopOutput) }
	c.stdout = oci.NewOutput(c.lim.OutputBytes, over, emit("stdout"))
	c.stderr = oci.NewOutput(c.lim.OutputBytes, over, emit("stderr"))
	c.alloc = &allocator{limit: uint64(max(c.lim.MemoryBytes, 0))}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	runCtx = experimental.WithMemoryAllocator(runCtx, c.alloc)
	cfg := c.moduleConfig(runCtx)
	c.started = time.Now()
	go c.run(runCtx, cfg)
	return nil
}

// moduleConfig is what the module gets: argv, the environment, stdin, the
// capped output, /work and /tmp, real clocks, a sleep that the run's end
// interrupts, and the host's randomness. No sockets: none is preopened,
// and WASI preview 1 cannot make one.
func (c *container) moduleConfig(ctx context.Context) wazero.ModuleConfig {
	// /work is also the root: wasi-libc resolves a relative path against
	// its working directory, "/" (WASI has no other), and a program of a
	// runc run has /work there. Longer prefixes win: /work and /tmp are
	// themselves.
	fsc := wazero.NewFSConfig().(sysfs.FSConfig).
		WithSysFSMount(c.workFS, "/").(sysfs.FSConfig).
		WithSysFSMount(c.workFS, "/work").(sysfs.FSConfig).
		WithSysFSMount(c.tmpFS, "/tmp")
	args := c.req.Args
	if c.kind == kindRuby {
		args = append([]string{"ruby"}, args[1:]...)
	}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithArgs(args...).
		WithStdout(stoppedWriter{ctx, c.stdout}).
		WithStderr(stoppedWriter{ctx, c.stderr}).
		WithFSConfig(fsc).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(func(ns int64) {
			t := time.NewTimer(time.Duration(ns))
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				// Returning would let the module run on until wazero's
				// next close check: a program's "after the sleep" code
				// (the hostile corpus's wasm_sleep prints ESCAPED) would
				// run past its end. Exiting here ends it inside the call.
				panic(wsys.NewExitError(137))
			}
		}).
		WithOsyield(goruntime.Gosched).
		WithRandSource(rand.Reader)
	if c.req.Stdin != nil {
		cfg = cfg.WithStdin(bytes.NewReader(c.req.Stdin))
	}
	if c.kind == kindRuby {
		cfg = cfg.WithStartFunctions()
	}
	for _, kv := range oci.Env(c.req) {
		k, v, _ := strings.Cut(kv, "=")
		cfg = cfg.WithEnv(k, v)
	}
	return cfg
}

// stoppedWriter drops what a module writes once its run has been stopped:
// between the stop and wazero's next close check (a function call or a
// loop's back edge) a module can still reach fd_write, and output written
// after the wall-clock or CPU limit is not the run's.
type stoppedWriter struct {
	ctx context.Context
	w   io.Writer
}

func (s stoppedWriter) Write(p []byte) (int, error) {
	if s.ctx.Err() != nil {
		return 0, wsys.NewExitError(137)
	}
	return s.w.Write(p)
}

// run is the run's goroutine: locked to its thread, whose CPU clock is the
// run's CPU time (cpu.go).
func (c *container) run(ctx context.Context, cfg wazero.ModuleConfig) {
	goruntime.LockOSThread() // never unlocked: the thread ends with the run
	defer close(c.exited)
	c.clockMu.Lock()
	c.clock = threadClock(unix.Gettid())
	c.cpu0, _ = cpuTime(c.clock)
	c.clockMu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			c.result = fmt.Errorf("%w: %v", errPanic, p)
		}
		c.ended = time.Now()
		t, _ := cpuTime(c.clock)
		c.clockMu.Lock()
		c.cpu, c.clock = max(t-c.cpu0, 0), 0
		c.clockMu.Unlock()
	}()
	mod, err := c.wrt.InstantiateModule(ctx, c.cm, cfg)
	if err == nil && c.kind == kindRuby {
		err = runRuby(ctx, mod, c.req.Args[1], c.req.Args[2:])
	}
	c.result = err
}

// errPanic marks a panic of the run's goroutine (wazero's, or a host
// function's).
var errPanic = errors.New("the wasm runtime panicked")

// cpuUsed is the CPU time of the run so far.
func (c *container) cpuUsed() time.Duration {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if c.clock == 0 {
		return c.cpu
	}
	t, ok := cpuTime(c.clock)
	if !ok {
		return c.cpu
	}
	return max(t-c.cpu0, 0)
}

// cpuPoll is how often the CPU-time watchdog looks (as oci's).
const cpuPoll = 50 * time.Millisecond

// Wait enforces the wall clock, the CPU time, the output caps and
// cancellation, then decides the verdict and reads /work back.
func (c *container) Wait(ctx context.Context) api.Phase {
	if c.started.IsZero() {
		return api.InternalError(errors.New("Wait called before Start"))
	}
	timer := time.NewTimer(time.Until(c.started.Add(c.lim.Timeout)))
	defer timer.Stop()
	tick := time.NewTicker(cpuPoll)
	defer tick.Stop()
	stop := oci.StopNone
wait:
	for {
		select {
		case <-c.exited:
			break wait
		case stop = <-c.stop:
		case <-timer.C:
			stop = oci.StopTimeout
		case <-ctx.Done():
			stop = oci.StopCancelled
		case <-tick.C:
			if c.lim.CPUTime > 0 && c.cpuUsed() >= c.lim.CPUTime {
				stop = oci.StopCPUTime
			}
		}
		if stop != oci.StopNone {
			break
		}
	}
	if stop != oci.StopNone {
		c.cancel()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			c.stdout.Mute()
			c.stderr.Mute()
			res := api.InternalError(fmt.Errorf("%w: run %s did not stop 5 s after it was cancelled", ErrRuntime, c.id))
			if c.workspace != nil {
				res.Message += " (the session keeps its files from before this run)"
			}
			return res
		}
		if stop == oci.StopTimeout && c.ended.Sub(c.started) < c.lim.Timeout {
			stop = oci.StopNone // it ended on its own in the same instant
		}
	}
	c.stdout.Flush()
	c.stderr.Flush()
	if stop == oci.StopNone && (c.stdout.Truncated() || c.stderr.Truncated()) {
		stop = oci.StopOutput
	}
	peak, refused := c.alloc.reached()
	usage := limits.Usage{CPUTime: c.cpu, MemoryPeakBytes: peak}
	code, status, msg := c.verdict(stop, usage, refused)
	status, msg = c.readBack(status, msg)
	return api.Phase{
		Stdout:          c.stdout.Text(),
		Stderr:          c.stderr.Text(),
		StdoutBytes:     c.stdout.Bytes(),
		StderrBytes:     c.stderr.Bytes(),
		ExitCode:        code,
		Status:          status,
		ExecutionTimeMS: c.ended.Sub(c.started).Milliseconds(),
		CPUTimeMS:       c.cpu.Milliseconds(),
		MemoryPeakBytes: int64(peak),
		StdoutTruncated: c.stdout.Truncated(),
		StderrTruncated: c.stderr.Truncated(),
		Message:         msg,
		LimitsEnforced:  Enforced(),
	}
}

// trapExit is the exit code of a module that trapped: 128+SIGABRT, what a
// native program that aborted gets (wasi-libc's abort() and a Rust panic
// are the unreachable instruction).
const trapExit = 134

// maxTrapMessage bounds the trap's text in the message (wazero's stack
// trace names the module's own functions: untrusted text, cleaned).
const maxTrapMessage = 2048

// verdict decides the exit code, status and message: what sandcell
// stopped comes first (oci.Verdict's order), then a growth the memory
// limit refused (if the program then failed), then how the module ended:
// proc_exit's status, a return from _start (0), or a trap (status error
// with the trap's message).
func (c *container) verdict(stop oci.StopReason, u limits.Usage, refused bool) (int, api.Status, string) {
	err := c.result
	var exit *wsys.ExitError
	code := 0
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = int(exit.ExitCode())
	default:
		code = trapExit
	}
	if stop != oci.StopNone {
		code = 128 + int(unix.SIGKILL)
		status, msg := oci.Verdict(stop, code, u, c.lim)
		return code, status, msg
	}
	if errors.Is(err, errPanic) {
		return -1, api.StatusInternalError, err.Error()
	}
	if refused && code != 0 {
		return code, api.StatusMemoryLimit, fmt.Sprintf("memory limit of %s reached: the module's linear memory could not grow past it", limits.FormatSize(c.lim.MemoryBytes))
	}
	if err != nil && exit == nil {
		msg := oci.CleanText([]byte(err.Error()))
		if len(msg) > maxTrapMessage {
			msg = msg[:maxTrapMessage] + "..."
		}
		return code, api.StatusError, "the module trapped: " + msg
	}
	status, msg := oci.Verdict(oci.StopNone, code, u, c.lim)
	return code, status, msg
}

// readBack hands /work over once the module is gone: Collect's files (a
// status ok run), then the workspace's Save (see oci.Request). The run's
// goroutine has ended: nothing writes /work any more.
func (c *container) readBack(status api.Status, msg string) (api.Status, string) {
	if c.req.Collect != nil && status == api.StatusOK {
		files, err := oci.Collect(c.work, c.lim.TmpfsBytes)
		if err != nil {
			status, msg = api.StatusError, "collecting the compiled files from /work: "+err.Error()
		} else {
			c.req.Collect(files)
		}
	}
	if ws := c.workspace; ws != nil {
		c.workspace = nil // Save is called once
		const kept = "(the session keeps its files from before this run)"
		if err := ws.Save(c.work); errors.Is(err, oci.ErrWorkRefused) {
			status, msg = api.StatusError, fmt.Sprintf("the session did not keep this run's /work: %v %s", err, kept)
		} else if err != nil {
			status, msg = api.StatusInternalError, fmt.Sprintf("saving /work to the session failed: %v %s", err, kept)
		}
	}
	return status, msg
}

// Destroy ends the module if it still runs and removes every trace of the
// run: its wazero runtime (memories unmapped, files closed) and its
// directories. Safe to call more than once.
func (c *container) Destroy() error {
	c.destroyOnce.Do(func() { c.destroyErr = c.destroy() })
	return c.destroyErr
}

func (c *container) destroy() error {
	var errs []error
	if c.cancel != nil {
		c.cancel()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			errs = append(errs, fmt.Errorf("run %s: module still running 5 s after it was cancelled", c.id))
		}
	}
	ctx := context.Background()
	if c.cm != nil {
		_ = c.cm.Close(ctx)
	}
	if c.wrt != nil {
		if err := c.wrt.Close(ctx); err != nil {
			errs = append(errs, err)
		}
		c.wrt = nil
	}
	for _, d := range []*dirFS{c.workFS, c.tmpFS} {
		if d != nil {
			d.close()
		}
	}
	if c.runDir != "" {
		if err := os.RemoveAll(c.runDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	c.rt.mu.Lock()
	delete(c.rt.live, c.id)
	c.rt.mu.Unlock()
	err := errors.Join(errs...)
	if err != nil {
		c.rt.log.Error("teardown incomplete", "container_id", c.id, "err", err)
	}
	return err
}
