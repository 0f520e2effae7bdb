package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/oci"
)

// PoolConfig configures a Pool. The zero value of each field has the
// meaning its comment gives.
type PoolConfig struct {
	// Size is the most idle containers one key keeps (0: no pool, every
	// request is prepared when it comes).
	Size int
	// Idle is how long a key may go without a request before its idle
	// containers are destroyed (default 60s).
	Idle time.Duration
	// Scripts are the argvs of interpreters that can wait pre-started for
	// their program: the last argument is /work/NAME, the program, one of
	// the request's Files (python's "/usr/bin/python3 -B /work/main.py").
	// A request whose Args equal one of them exactly gets such an
	// interpreter (see prestart); any other request a prepared container.
	Scripts [][]string
	// Busy, if set, reports that runs are waiting for a slot (the
	// server's gate): nothing is prepared ahead while it is true.
	Busy func() bool
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// DefaultPoolIdle is PoolConfig.Idle's default.
const DefaultPoolIdle = 60 * time.Second

// Pool is a Runtime that hands out containers prepared ahead of their
// requests, each used once and destroyed. Over a Libcontainer (NewPool):
// created, init started, namespaces, mounts, cgroup, rlimits and seccomp in
// place. Over a Runsc (NewGVisorPool): a gVisor sandbox created by `runsc
// create` (sentry and gofer booted, in the run's cgroup), started on
// request (see Runsc's prepare).
//
// A container is prepared for a key: everything fixed when a container
// is prepared (root, environment, working directory, limits, /work size,
// whether there is standard input, and for a pre-started interpreter its
// argv). A request gets an idle container of its own key or, if there is
// none, one prepared for it then, exactly as Libcontainer.Prepare does: a
// request never gets a container of other limits, and a pooled container
// has the same spec, seccomp filter, namespaces and limits as a fresh one.
// The per-request parts (argv, /work's files, standard input, the output
// callback, Collect, the workspace) are given to the container when the
// request takes it.
//
// Pooled containers are ordinary containers of the Libcontainer (a
// Runsc shares its Libcontainer's instance): its Close and, after a crash,
// the next start's Recover remove them.
type Pool struct {
	be   poolBackend
	cfg  PoolConfig
	log  *slog.Logger
	tick time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}

	mu      sync.Mutex
	keys    map[string]*poolEntry
	fresh   int // requests preparing a container of their own right now
	running int // containers handed out and not yet destroyed
	closed  bool
	bg      sync.WaitGroup // the refiller and background destroys
	stats   PoolStats
}

// PoolStats counts what a pool did.
type PoolStats struct {
	Hits     uint64 // requests served by a container prepared ahead
	Misses   uint64 // requests of a pool key prepared when they came
	Other    uint64 // requests a pool cannot serve (see Pool.classify)
	Prepared uint64 // containers prepared ahead
	Unused   uint64 // containers destroyed unused (idle key, Close)
}

// poolEntry is one key's containers and demand.
type poolEntry struct {
	kind      poolKind
	tmpl      oci.Request // what the key's containers are prepared with
	script    string      // kindScript: the program's name in /work
	idle      []poolMember
	preparing int
	added     chan struct{} // closed (and replaced) when a container is added or a preparation ends
	demand    demand
	retry     time.Time // after a failed preparation, none before this
}

// poolBackend is what a Pool prepares its containers with.
type poolBackend interface {
	// prepareFresh prepares a container for a validated req now, as the
	// runtime does without a pool.
	prepareFresh(ctx context.Context, req *oci.Request) (poolMember, error)
	// prepareAhead prepares a container for e's key (e.tmpl), to wait in
	// the pool.
	prepareAhead(ctx context.Context, e *poolEntry) (poolMember, error)
	// classify says whether the pool can serve req identically to a fresh
	// run, under which key, with e a new entry for the key.
	classify(cfg *PoolConfig, req *oci.Request) (key string, e *poolEntry, ok bool)
	// bind gives an idle container of e its request.
	bind(c poolMember, e *poolEntry, req *oci.Request) error
}

// poolMember is a container a Pool holds: a container of its backend.
type poolMember interface {
	oci.Container
	// base is the container's run (its streams, /work, exit).
	base() *run
	// fillWork writes a bound request's files and workspace into /work.
	fillWork(ctx context.Context, req *oci.Request) error
}

// NewPool starts a pool over rt. Close it before rt.
func NewPool(rt *Libcontainer, cfg PoolConfig) *Pool {
	return newPool(lcPool{rt}, cfg)
}

// NewGVisorPool starts a pool of gVisor sandboxes over g: each is created
// ahead (`runsc create`, the costly part of a gVisor run: the sentry's and
// gofer's boot) and started when its request comes. Only runs in a cgroup
// are pooled (a rootless server without a delegated subtree runs every
// request fresh): the cgroup is what ends an idle sandbox whose holder is
// gone; nor are a rootless server's (see gvPool.classify). Close it
// before g's Libcontainer.
func NewGVisorPool(g *Runsc, cfg PoolConfig) *Pool {
	return newPool(gvPool{g}, cfg)
}

func newPool(be poolBackend, cfg PoolConfig) *Pool {
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultPoolIdle
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{be: be, cfg: cfg, log: log, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		keys: map[string]*poolEntry{}, tick: min(max(cfg.Idle/4, 10*time.Millisecond), 250*time.Millisecond)}
	if cfg.Size > 0 {
		p.bg.Add(1)
		go p.refill()
	}
	return p
}

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Idle returns how many containers wait in the pool, all keys together.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.keys {
		n += len(e.idle)
	}
	return n
}

// IdleFor returns how many containers wait in the pool for requests like
// req (of its key).
func (p *Pool) IdleFor(req *oci.Request) int {
	if req.Validate() != nil {
		return 0
	}
	key, _, ok := p.be.classify(&p.cfg, req)
	if !ok {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.keys[key]; e != nil {
		return len(e.idle)
	}
	return 0
}

// Close stops preparing, destroys every idle container and waits for the
// containers being destroyed in the background. Containers handed out
// and not yet destroyed are the runtime's (its Close destroys them).
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var idle []poolMember
	for _, e := range p.keys {
		idle = append(idle, e.idle...)
		e.idle = nil
	}
	p.stats.Unused += uint64(len(idle))
	p.mu.Unlock()
	p.cancel()
	var errs []error
	for _, c := range idle {
		errs = append(errs, c.Destroy())
	}
	p.bg.Wait()
	return errors.Join(errs...)
}

// Prepare hands out a container for req: one prepared ahead for req's
// key, else (none idle, the pool off, or a request the pool cannot serve
// identically) one prepared now.
func (p *Pool) Prepare(ctx context.Context, req *oci.Request) (oci.Container, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if p.cfg.Size <= 0 {
		return p.prepareOther(ctx, req)
	}
	key, e, ok := p.be.classify(&p.cfg, req)
	now := time.Now()
	p.mu.Lock()
	if !ok || p.closed {
		p.stats.Other++
		p.mu.Unlock()
		return p.prepareOther(ctx, req)
	}
	if old := p.keys[key]; old != nil {
		e = old
	} else {
		p.keys[key] = e
	}
	e.demand.acquire(now, p.cfg.Idle)
	p.mu.Unlock()
	release := func() {
		p.mu.Lock()
		e.demand.release(time.Now(), p.cfg.Idle)
		p.mu.Unlock()
	}
	for {
		c, err := p.take(ctx, e)
		if err != nil {
			release()
			return nil, err
		}
		if c == nil {
			break
		}
		if err := p.be.bind(c, e, req); err != nil {
			p.destroy(c)
			if errors.Is(err, errStale) {
				continue
			}
			release()
			return nil, err
		}
		return p.handOut(c, release), nil
	}
	c, err := p.be.prepareFresh(ctx, req)
	p.mu.Lock()
	p.fresh--
	p.mu.Unlock()
	p.kick()
	if err != nil {
		release()
		return nil, err
	}
	return p.handOut(c, release), nil
}

// prepareOther prepares a request the pool does not serve, as its backend
// does without a pool.
func (p *Pool) prepareOther(ctx context.Context, req *oci.Request) (oci.Container, error) {
	c, err := p.be.prepareFresh(ctx, req)
	if err != nil {
		return nil, err // not a nil poolMember in a non-nil Container
	}
	return c, nil
}

// handOut wraps a container given to a request; it counts as running
// until it is destroyed.
func (p *Pool) handOut(c poolMember, release func()) *pooled {
	p.mu.Lock()
	p.running++
	p.mu.Unlock()
	return &pooled{poolMember: c, pool: p, release: release}
}

// take returns an idle container of e, waiting for one being prepared;
// nil (and the request counted as preparing its own) when there is none.
func (p *Pool) take(ctx context.Context, e *poolEntry) (poolMember, error) {
	for {
		p.mu.Lock()
		if n := len(e.idle); n > 0 {
			c := e.idle[n-1]
			e.idle = e.idle[:n-1]
			p.stats.Hits++
			p.mu.Unlock()
			return c, nil // its replacement comes when the run is over (Destroy)
		}
		if e.preparing == 0 || p.closed {
			p.stats.Misses++
			p.fresh++
			p.mu.Unlock()
			return nil, nil
		}
		// A container of this key is being prepared: it is ready sooner
		// than one prepared from the start.
		added := e.added
		p.mu.Unlock()
		select {
		case <-added:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// errStale: an idle container's init died before it was used (killed,
// out of memory): the next one is taken.
var errStale = errors.New("pooled container died while idle")

// kick wakes the refiller.
func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// destroy destroys a container the pool holds, in the background unless
// the pool is closed.
func (p *Pool) destroy(c poolMember) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Destroy()
		return
	}
	p.bg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.bg.Done()
		_ = c.Destroy()
	}()
}

// refill keeps every key at its target until the pool is closed.
func (p *Pool) refill() {
	defer p.bg.Done()
	t := time.NewTicker(p.tick)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		case <-t.C:
		}
		for p.ctx.Err() == nil && p.step() {
		}
	}
}

// step destroys the idle containers past their key's target, removes keys
// nobody asks for any more, and prepares one container for a key below its
// target if the host has room for it: no request is preparing its own
// container or waiting for a slot, and runs hold fewer than half the CPUs
// (on two CPUs: none runs). It reports whether it prepared one (there may
// be more to do).
func (p *Pool) step() bool {
	now := time.Now()
	var surplus []poolMember
	var want *poolEntry
	p.mu.Lock()
	for k, e := range p.keys {
		t := e.demand.target(now, p.cfg.Idle, p.cfg.Size)
		for len(e.idle) > t {
			surplus = append(surplus, e.idle[0]) // the oldest first
			e.idle = e.idle[1:]
		}
		if len(e.idle) == 0 && e.preparing == 0 && !e.demand.active(now, p.cfg.Idle) {
			delete(p.keys, k)
			continue
		}
		if want == nil && len(e.idle)+e.preparing < t && now.After(e.retry) {
			want = e
		}
	}
	p.stats.Unused += uint64(len(surplus))
	if want != nil && (p.fresh > 0 || 2*p.running >= runtime.NumCPU() || p.closed || (p.cfg.Busy != nil && p.cfg.Busy())) {
		want = nil
	}
	if want != nil {
		want.preparing++
	}
	p.mu.Unlock()
	for _, c := range surplus {
		_ = c.Destroy()
	}
	if want == nil {
		return false
	}
	c, err := p.be.prepareAhead(p.ctx, want)
	p.mu.Lock()
	want.preparing--
	close(want.added)
	want.added = make(chan struct{})
	switch {
	case err != nil:
		want.retry = time.Now().Add(time.Second)
	case p.closed:
		p.stats.Unused++
	default:
		want.idle = append(want.idle, c)
		p.stats.Prepared++
	}
	closed := p.closed
	p.mu.Unlock()
	if err != nil {
		if p.ctx.Err() == nil {
			p.log.Warn("preparing a pooled container", "kind", want.kind.String(), "err", err)
		}
		return false
	}
	if closed {
		_ = c.Destroy()
		return false
	}
	return true
}

// pooledAlone says whether req must run fresh whatever the backend:
// network mode egress, a network policy and dependency mounts are set up at prepare time,
// for one request, and so is a stream for stdin (rare: an interactive
// client).
func pooledAlone(req *oci.Request) bool {
	return req.Egress != "" || req.Network != nil || len(req.Mounts) > 0 || req.StdinStream != nil
}

// template fills e.tmpl and returns e's key: everything of req fixed when
// a container is prepared (root, environment, working directory, limits,
// /work's size, whether there is standard input), and args, the argv the
// container is prepared with, when it is part of the key (nil: the
// program's argv comes at Start).
func (e *poolEntry) template(req *oci.Request, prepared []string, args []string) string {
	e.tmpl = oci.Request{Root: req.Root, Env: slices.Clone(req.Env), Cwd: req.Cwd, Limits: req.Limits, WorkBytes: req.WorkBytes,
		Args: slices.Clone(prepared)}
	if req.Stdin != nil {
		e.tmpl.Stdin = []byte{}
	}
	var k strings.Builder
	fmt.Fprintf(&k, "%d\x00%s\x00%s\x00%s\x00%#v\x00%d\x00%t\x00", e.kind, req.Root, strings.Join(req.Env, "\x01"), req.Cwd, req.Limits, req.WorkBytes, req.Stdin != nil)
	k.WriteString(strings.Join(args, "\x01"))
	return k.String()
}

// bindRun gives a pooled container's run its request: /work's files
// (files, the request's own unless the backend moved one) and workspace,
// standard input, the output callback and Collect; its output is read
// from now on.
func bindRun(c poolMember, req *oci.Request, files []api.File) error {
	r := c.base()
	select {
	case <-r.exited:
		return errStale
	default:
	}
	if err := c.fillWork(context.Background(), &oci.Request{Workspace: req.Workspace, Files: files}); err != nil {
		return err
	}
	r.collect, r.workspace, r.onOutput, r.stdin = req.Collect, req.Workspace, req.OnOutput, req.Stdin
	r.capture()
	return nil
}

// lcPool is a Pool's backend over libcontainer: a container's init waits
// for its program, a launcher or a pre-started interpreter (prestart).
type lcPool struct{ rt *Libcontainer }

func (b lcPool) prepareFresh(ctx context.Context, req *oci.Request) (poolMember, error) {
	c, err := b.rt.prepare(ctx, req, nil, prepareAs{})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (b lcPool) prepareAhead(ctx context.Context, e *poolEntry) (poolMember, error) {
	c, err := b.rt.prepare(ctx, &e.tmpl, &prestart{kind: e.kind, script: e.script}, prepareAs{})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// classify: over libcontainer, a request is served by
//   - A pre-started interpreter (kindScript): req.Args is one of
//     PoolConfig.Scripts exactly, its program /work/NAME is one of
//     req.Files, and there is no workspace (a session's /work is filled
//     when the request comes; the interpreter's script must be a FIFO
//     from the start). No file is hidden (.NAME): HOME is /work, and an
//     interpreter reads some dot files at its start-up, before the
//     request came (python's user site, ~/.local/lib/.../*.pth).
//   - A prepared container (kindLauncher): Args[0] is an absolute path to
//     an executable file of the root (as runc checks before the program
//     starts: a fresh run fails to start otherwise, which the launcher
//     could not reproduce), and the environment is one runc passes as it
//     is (see launcherEnv).
//
// Anything else runs fresh.
func (b lcPool) classify(cfg *PoolConfig, req *oci.Request) (string, *poolEntry, bool) {
	if pooledAlone(req) {
		return "", nil, false
	}
	e := &poolEntry{added: make(chan struct{})}
	for _, s := range cfg.Scripts {
		name, ok := strings.CutPrefix(s[len(s)-1], oci.WorkDir+"/")
		if !ok || name == "" || strings.Contains(name, "/") || !slices.Equal(req.Args, s) || req.Workspace != nil ||
			!slices.ContainsFunc(req.Files, func(f api.File) bool { return f.Path == name }) ||
			slices.ContainsFunc(req.Files, func(f api.File) bool { return strings.HasPrefix(f.Path, ".") }) {
			continue
		}
		e.kind, e.script = kindScript, name
		break
	}
	if e.kind == 0 {
		a0 := req.Args[0]
		if !path.IsAbs(a0) || strings.Contains(a0, "=") || !executableIn(req.Root, a0) || !executableIn(req.Root, busybox) {
			return "", nil, false
		}
		if _, ok := launcherEnv(oci.Env(req)); !ok {
			return "", nil, false
		}
		e.kind = kindLauncher
	}
	if e.kind == kindScript {
		return e.template(req, req.Args, req.Args), e, true
	}
	return e.template(req, []string{busybox}, nil), e, true
}

// busybox is the base layer's static busybox, which every root has.
const busybox = "/bin/busybox"

// executableIn says whether name, an absolute path inside the root
// filesystem root, is an executable file there (symlinks resolved inside
// root), as exec.LookPath decides in runc's init.
func executableIn(root, name string) bool {
	p, err := securejoin.SecureJoin(root, name)
	if err != nil {
		return false
	}
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// bind gives a pooled container its request: /work's files and
// workspace, standard input, the output callback, Collect, and what to
// start (the launcher's command line, or the interpreter's script).
func (b lcPool) bind(m poolMember, e *poolEntry, req *oci.Request) error {
	c := m.(*lcContainer)
	files := req.Files
	if e.kind == kindScript {
		files = slices.Clone(req.Files)
		i := slices.IndexFunc(files, func(f api.File) bool { return f.Path == e.script })
		// The program is written beside its FIFO under a name no
		// request file has, and renamed over the FIFO at Start.
		tmp := ".sandcell-" + strconv.FormatUint(b.rt.seq.Add(1), 36) + "-" + e.script
		for slices.ContainsFunc(files, func(f api.File) bool { return f.Path == tmp }) {
			tmp = "." + tmp
		}
		files[i].Path = tmp
		c.pre.tmp, c.pre.src = tmp, files[i].Data
	} else {
		host := oci.Host{WorkDir: c.work, UIDBase: b.rt.cfg.UIDBase, Seccomp: b.rt.cfg.Seccomp, SingleID: b.rt.cfg.SingleID}
		if b.rt.cfg.Cgroups != nil {
			host.CgroupsPath = b.rt.cfg.Cgroups.ChildPath(c.id)
		}
		spec, err := oci.BuildSpec(req, host)
		if err != nil {
			return err
		}
		env, _ := launcherEnv(spec.Process.Env)
		argv := append(append([]string{busybox, "env", "-i", "--"}, env...), spec.Process.Args...)
		line := launcherLine(argv)
		if len(line) > maxLauncherLine {
			return fmt.Errorf("%w: command line of %d bytes for a prepared container", oci.ErrInvalidRequest, len(line))
		}
		c.pre.line = line
	}
	return bindRun(c, req, files)
}

// pooled is a container handed out by a Pool: it counts the key's demand
// and, once its program is gone, is destroyed in the background, so that
// a caller's Destroy (after the result) costs nothing.
type pooled struct {
	poolMember
	pool    *Pool
	release func()

	once sync.Once
	err  error
}

func (w *pooled) Destroy() error {
	w.once.Do(func() {
		w.release()
		w.pool.mu.Lock()
		w.pool.running--
		w.pool.mu.Unlock()
		w.pool.kick()
		select {
		case <-w.base().exited:
			// The program is gone (init of its pid namespace; a gVisor
			// run's sandbox, whose settle ran in Wait): what is left is
			// teardown.
			w.pool.destroy(w.poolMember)
		default:
			w.err = w.poolMember.Destroy()
		}
	})
	return w.err
}

// prestart is how a pooled container's init is started and later given
// its program.
//   - kindLauncher: init runs busybox with launcherScript, fd 3 the read
//     end of a pipe; Start writes the command line (see launcherLine) to
//     it. busybox "env -i" sets the environment exactly as runc would
//     have (the shell reorders it and adds PWD and SHLVL) and execs the
//     program.
//   - kindScript: init runs the request's argv itself; its script, a FIFO
//     in /work, blocks the interpreter in open() after its start-up.
//     Start opens the FIFO's write end (the interpreter's open returns),
//     renames the program's file over the FIFO, then writes the program
//     into the FIFO and closes it: the interpreter reads its script to the
//     end and runs it as it would from the file, and from then on /work
//     holds the file as in a fresh run. Python does not seek or stat its
//     script beyond fstat (not a directory); runpy is not involved.
type prestart struct {
	kind   poolKind
	script string // kindScript: the program's name in /work

	cmdR, cmdW *os.File // kindLauncher: the command pipe
	line       string   // kindLauncher: the command, set by bind
	tmp        string   // kindScript: the program's file until Start, set by bind
	src        []byte   // kindScript: the program, set by bind
}

// init arranges the init process before the container starts.
func (s *prestart) init(work string, proc *libcontainer.Process, uid, gid uint32) error {
	switch s.kind {
	case kindLauncher:
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
		s.cmdR, s.cmdW = r, w
		// The rootless "ulimit -v" wrapper (noCgroups) comes with the
		// program's argv, on the command line.
		proc.Args = []string{busybox, "sh", "-c", launcherScript}
		proc.ExtraFiles = []*os.File{r}
	case kindScript:
		fifo := filepath.Join(work, s.script)
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
		if err := errors.Join(os.Chown(fifo, int(uid), int(gid)), os.Chmod(fifo, 0o644)); err != nil {
			return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
	}
	return nil
}

// started closes this process's copy of what init took.
func (s *prestart) started() {
	if s.cmdR != nil {
		s.cmdR.Close()
		s.cmdR = nil
	}
}

// close releases what is left (the container is destroyed).
func (s *prestart) close() {
	s.started()
	if s.cmdW != nil {
		s.cmdW.Close()
		s.cmdW = nil
	}
}

// start hands the container its program.
func (s *prestart) start(ctx context.Context, c *lcContainer) error {
	switch s.kind {
	case kindLauncher:
		w := s.cmdW
		s.cmdW = nil
		_, err := w.WriteString(s.line)
		w.Close()
		if errors.Is(err, unix.EPIPE) {
			return nil // the launcher died: Wait reports how
		}
		return err
	case kindScript:
		return s.feed(ctx, c)
	}
	return fmt.Errorf("%w: %v", oci.ErrRuntime, s.kind)
}

// feed opens the FIFO (waiting for the interpreter to reach it), renames the
// program's file over it and writes the program into it.
func (s *prestart) feed(ctx context.Context, c *lcContainer) error {
	fifo := filepath.Join(c.work, s.script)
	var fd int
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		var err error
		fd, err = unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENXIO) {
			return err
		}
		// ENXIO: no reader yet, the interpreter is still starting.
		select {
		case <-c.exited:
			return nil // it died starting: Wait reports how
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return err
	}
	f := os.NewFile(uintptr(fd), fifo)
	root, err := os.OpenRoot(c.work)
	if err == nil {
		err = root.Rename(s.tmp, s.script)
		root.Close()
	}
	if err != nil {
		f.Close()
		return err
	}
	go func(src []byte) {
		// EPIPE when the interpreter died reading is fine: Wait reports it.
		_, _ = f.Write(src)
		f.Close()
	}(s.src)
	s.src = nil
	return nil
}
