package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci"
)

// A warm pool of live sandboxes (issue #39): creating a live sandbox is
// almost all libcontainer's container start (tens of ms), and its first
// create on a new UpperDir adds mkfs.ext4 (0.1-0.2 s). The pool starts
// sandboxes ahead, each with its disk image made, mounted and its init
// running, for every kind of sandbox it was asked for before (the key:
// root, environment, limits, mounts, disk size, user, home), and hands one
// out on a create of that kind: its image is renamed into the caller's
// UpperDir (the loop device and the lock follow the inode), its id becomes
// the caller's. A create it cannot serve (another kind, an UpperDir that
// holds a disk already, a workspace to fill, a network) starts a fresh
// one. The pool raises the burst rate, not the sustained one: every
// sandbox still costs one container start, only earlier.
//
// What the pool keeps is bounded: at most MaxKinds kinds (a create of a
// new kind past it forgets the kind asked for least recently, and its
// prepared sandboxes), each forgotten with its sandboxes once it was not
// asked for in Idle. Kinds are the callers' choice (every distinct set of
// limits is one): without the bounds a client could make the server keep
// a prepared sandbox (memory, a disk image, a container) for every set it
// ever named, for the server's life.
//
// A prepared sandbox's container is <instance>-pool-<n> (Recover's naming
// rule: the instance prefix says whose it is); its disk lives in
// Dir/<instance>-pool-<n> until handed out. Close destroys the idle ones
// and removes their disks; NewLivePool removes the disks a dead instance's
// pool left in Dir (its containers are Recover's).

// LivePoolConfig configures a LivePool.
type LivePoolConfig struct {
	// Size is the most idle sandboxes per key.
	Size int
	// Dir holds the idle sandboxes' disks; it must be on the filesystem
	// of the callers' UpperDirs (a hand-out renames the image there; on
	// another filesystem the create starts a fresh sandbox).
	Dir string
	// Busy, if set, says the host is loaded: nothing is prepared then.
	Busy func() bool
	// Idle is how long a kind may go unasked before it is forgotten with
	// its prepared sandboxes (DefaultLiveIdle); MaxKinds how many kinds
	// are prepared at most (DefaultLiveKinds).
	Idle     time.Duration
	MaxKinds int
}

// LivePoolConfig's defaults.
const (
	DefaultLiveIdle  = 10 * time.Minute
	DefaultLiveKinds = 4
)

// LivePool starts live sandboxes, from the pool when it has one of the
// kind asked for (oci.LiveRuntime).
type LivePool struct {
	rt  *Libcontainer
	cfg LivePoolConfig
	log *slog.Logger

	ctx    context.Context // of the background preparation; cancelled by Close
	cancel context.CancelFunc
	kickCh chan struct{}
	done   chan struct{}
	seq    atomic.Uint64

	mu     sync.Mutex
	keys   map[string]*liveKind
	closed bool
	hits   int
}

// liveKind is one key's request and its idle sandboxes.
type liveKind struct {
	req   oci.Request
	opts  oci.SandboxOptions // ID and UpperDir unset
	idle  []*liveSandbox
	asked time.Time // the last create of this kind
}

// NewLivePool starts a pool in front of rt and removes what a dead
// instance's pool left in cfg.Dir.
func NewLivePool(rt *Libcontainer, cfg LivePoolConfig) (*LivePool, error) {
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("%w: live pool dir %q is not absolute", oci.ErrInvalidRequest, cfg.Dir)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: live pool dir: %w", oci.ErrRuntime, err)
	}
	if err := removeDeadPoolDisks(cfg.Dir, rt.instance); err != nil {
		return nil, err
	}
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultLiveIdle
	}
	if cfg.MaxKinds <= 0 {
		cfg.MaxKinds = DefaultLiveKinds
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &LivePool{rt: rt, cfg: cfg, log: rt.log, ctx: ctx, cancel: cancel,
		kickCh: make(chan struct{}, 1), done: make(chan struct{}), keys: map[string]*liveKind{}}
	go p.refill()
	return p, nil
}

// removeDeadPoolDisks removes the pool disks in dir of instances other
// than ours that are dead, or whose image nobody holds locked.
func removeDeadPoolDisks(dir, ours string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: live pool dir: %w", oci.ErrRuntime, err)
	}
	var errs []error
	for _, e := range entries {
		inst := instanceOf(e.Name())
		if !e.IsDir() || inst == ours || !strings.Contains(e.Name(), "-pool-") {
			continue
		}
		if tok, ok := instanceOwner(inst); ok && !tok.Dead() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if f, err := os.OpenFile(filepath.Join(p, liveImage), os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			busy := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
			f.Close()
			if busy {
				continue // still mounted by a sandbox being torn down
			}
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("%w: remove a dead pool's disk: %w", oci.ErrRuntime, err))
		}
	}
	return errors.Join(errs...)
}

// liveKey is what makes two creates interchangeable, "" for a create the
// pool never serves.
func liveKey(req *oci.Request, opts oci.SandboxOptions) string {
	if req.Workspace != nil || req.Network != nil || req.Egress != "" || len(req.Files) > 0 {
		return "" // filled or connected per sandbox
	}
	return fmt.Sprintf("%q|%q|%q|%+v|%+v|%d|%d|%q|%q", req.Root, req.Env, req.Cwd, req.Limits, req.Mounts,
		req.WorkBytes, opts.DiskBytes, opts.User, opts.Home)
}

// StartSandbox hands out a prepared sandbox of the kind asked for, or
// starts a fresh one (oci.LiveRuntime). The kind is remembered: the pool
// prepares it from then on.
func (p *LivePool) StartSandbox(ctx context.Context, req *oci.Request, opts oci.SandboxOptions) (oci.Sandbox, error) {
	if err := p.rt.checkSandbox(req, opts); err != nil {
		return nil, err
	}
	key := liveKey(req, opts)
	if key != "" && p.fresh(opts.UpperDir) {
		for {
			s := p.take(key, req, opts)
			if s == nil {
				break
			}
			if err := p.handOut(s, opts); err != nil {
				p.log.Warn("live pool: a prepared sandbox could not be handed out", "container_id", s.c.id, "err", err)
				p.discard(s)
				if errors.Is(err, unix.EXDEV) {
					break
				}
				continue
			}
			p.kick()
			return s, nil
		}
		p.kick()
	}
	return p.rt.StartSandbox(ctx, req, opts)
}

// fresh says whether upper holds no disk yet (a re-create keeps its own).
func (p *LivePool) fresh(upper string) bool {
	_, err := os.Lstat(filepath.Join(upper, liveImage))
	return errors.Is(err, os.ErrNotExist)
}

// take removes an idle sandbox of key that is still alive, nil if none;
// it records key as asked for.
func (p *LivePool) take(key string, req *oci.Request, opts oci.SandboxOptions) *liveSandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	k := p.keys[key]
	if k == nil {
		if len(p.keys) >= p.cfg.MaxKinds {
			p.forget(p.stalest())
		}
		k = &liveKind{req: *liveRequest(req), opts: opts}
		k.opts.ID, k.opts.UpperDir = "", ""
		p.keys[key] = k
	}
	k.asked = time.Now()
	for len(k.idle) > 0 {
		s := k.idle[0]
		k.idle = k.idle[1:]
		if s.alive() {
			p.hits++
			return s
		}
		go p.discard(s)
	}
	return nil
}

// stalest is the key asked for least recently; p.mu held.
func (p *LivePool) stalest() string {
	var key string
	var at time.Time
	for k, c := range p.keys {
		if key == "" || c.asked.Before(at) {
			key, at = k, c.asked
		}
	}
	return key
}

// forget drops a kind; its prepared sandboxes are destroyed in the
// background. p.mu held.
func (p *LivePool) forget(key string) {
	k := p.keys[key]
	if k == nil {
		return
	}
	delete(p.keys, key)
	for _, s := range k.idle {
		go p.discard(s)
	}
	p.log.Debug("live pool: a kind forgotten", "prepared", len(k.idle))
}

// expire forgets the kinds not asked for in Idle.
func (p *LivePool) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, k := range p.keys {
		if time.Since(k.asked) > p.cfg.Idle {
			p.forget(key)
		}
	}
}

// Kinds is how many kinds of sandbox the pool prepares.
func (p *LivePool) Kinds() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.keys)
}

// handOut moves s's disk image into opts.UpperDir and gives s the
// caller's id. The image is renamed, never copied: the loop device and
// the lock hold its inode, and the lock's name follows (awaitLoopDetached
// compares the loop's backing file with it).
func (p *LivePool) handOut(s *liveSandbox, opts oci.SandboxOptions) error {
	d := s.disk
	if err := os.MkdirAll(opts.UpperDir, 0o700); err != nil {
		return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	from, to := filepath.Join(d.upperDir, liveImage), filepath.Join(opts.UpperDir, liveImage)
	// RENAME_NOREPLACE: a disk that appeared meanwhile is never replaced.
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("%w: move the disk to %s: %w", oci.ErrRuntime, opts.UpperDir, err)
	}
	fd, err := unix.FcntlInt(d.lock.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		// The image is the caller's now; the sandbox too.
		return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	old := d.lock
	d.lock = os.NewFile(uintptr(fd), to) // the same open file: the flock stays
	old.Close()
	_ = os.Remove(d.upperDir) // empty now
	d.upperDir = opts.UpperDir
	if opts.ID != "" {
		s.id = opts.ID
	}
	return nil
}

// discard destroys an idle sandbox and removes its disk.
func (p *LivePool) discard(s *liveSandbox) {
	if err := s.Destroy(); err != nil {
		p.log.Warn("live pool: destroy a prepared sandbox", "container_id", s.c.id, "err", err)
	}
	if filepath.Dir(s.disk.upperDir) == p.cfg.Dir {
		if err := os.RemoveAll(s.disk.upperDir); err != nil {
			p.log.Warn("live pool: remove a prepared sandbox's disk", "dir", s.disk.upperDir, "err", err)
		}
	}
}

func (p *LivePool) kick() {
	select {
	case p.kickCh <- struct{}{}:
	default:
	}
}

// refill prepares sandboxes one at a time until every key has Size idle,
// yielding while the host is busy (a create then waits for no
// preparation of ours).
func (p *LivePool) refill() {
	defer close(p.done)
	t := time.NewTicker(min(max(p.cfg.Idle/4, 10*time.Millisecond), time.Minute))
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.kickCh:
		case <-t.C:
			p.expire()
			continue
		}
		for p.ctx.Err() == nil && (p.cfg.Busy == nil || !p.cfg.Busy()) && p.step() {
		}
	}
}

// step prepares one sandbox for a key short of Size; false when none is.
func (p *LivePool) step() bool {
	p.mu.Lock()
	var k *liveKind
	var key string
	for kk, c := range p.keys {
		if len(c.idle) < p.cfg.Size {
			k, key = c, kk
			break
		}
	}
	p.mu.Unlock()
	if k == nil {
		return false
	}
	name := "pool-" + strconv.FormatUint(p.seq.Add(1), 10)
	opts := k.opts
	opts.UpperDir = filepath.Join(p.cfg.Dir, p.rt.instance+"-"+name)
	s, err := p.rt.startLive(p.ctx, &k.req, opts, name)
	if err != nil {
		_ = os.RemoveAll(opts.UpperDir)
		if p.ctx.Err() == nil {
			p.log.Warn("live pool: prepare a sandbox", "err", err)
		}
		return false
	}
	p.mu.Lock()
	if closed := p.closed; closed || p.keys[key] != k {
		p.mu.Unlock()
		p.discard(s) // closed, or the kind was forgotten meanwhile
		return !closed
	}
	k.idle = append(k.idle, s)
	p.mu.Unlock()
	return true
}

// Idle is how many prepared sandboxes wait.
func (p *LivePool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, k := range p.keys {
		n += len(k.idle)
	}
	return n
}

// Hits is how many creates were served from the pool.
func (p *LivePool) Hits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits
}

// Close stops the preparation and destroys the idle sandboxes with their
// disks. Sandboxes handed out are their callers'.
func (p *LivePool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var idle []*liveSandbox
	for _, k := range p.keys {
		idle = append(idle, k.idle...)
		k.idle = nil
	}
	p.mu.Unlock()
	p.cancel()
	<-p.done
	for _, s := range idle {
		p.discard(s)
	}
	// A preparation's disk that its failure left (it removes its own).
	entries, err := os.ReadDir(p.cfg.Dir)
	if err != nil {
		return fmt.Errorf("%w: live pool dir: %w", oci.ErrRuntime, err)
	}
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), p.rt.instance+"-pool-") {
			if err := os.RemoveAll(filepath.Join(p.cfg.Dir, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("%w: %w", oci.ErrRuntime, err))
			}
		}
	}
	return errors.Join(errs...)
}

var _ oci.LiveRuntime = (*LivePool)(nil)
