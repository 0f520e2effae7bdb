package service

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
)

// Live sandboxes (issue #39): the table of a server's live sandboxes, their
// lifetimes, pause and resume. Each is started by executor.StartSandbox
// (the same plan as a run's, shape sandbox); its processes are in
// sandbox_proc.go, its files in sandbox_files.go. Live implements
// api.Sandboxes (Service.Live); Service.Close kills every sandbox.

// Defaults of SandboxOptions' zero values.
const (
	DefaultMaxSandboxes     = 1024
	DefaultMaxProcesses     = 256
	DefaultSandboxLifetime  = 5 * time.Minute
	DefaultMaxLifetime      = 24 * time.Hour
	DefaultSandboxDiskMB    = 1024
	DefaultMaxSandboxDiskMB = 16 << 10
	DefaultRingBytes        = 1 << 20
	DefaultSandboxRingBytes = 16 << 20
	DefaultKeepEnded        = time.Minute
	DefaultKeepalive        = 15 * time.Second
)

// Bounds on what a caller gives a sandbox to keep.
const (
	maxMetadata      = 64   // entries
	maxMetadataBytes = 4096 // key and value of one entry
	maxEnv           = 512  // entries of a sandbox's or a process's env
	maxGone          = 4096 // ended sandboxes whose reason later calls are told
	// SandboxIDKey is the metadata key that names a sandbox of before (a
	// restart, a death) to re-create on its files: its processes are gone.
	SandboxIDKey = "sandbox_id"
)

// The default user of a sandbox and root.
const (
	sandboxUser = "user"
	sandboxHome = "/home/user"
	sandboxUID  = 1000
)

// SandboxOptions configure a service's live sandboxes. The zero value of
// each field is its default.
type SandboxOptions struct {
	// Max is how many sandboxes may live at once (--max-sandboxes, 1024);
	// past it a new one is refused as busy. MaxProcesses bounds the
	// running processes of one sandbox (256).
	Max, MaxProcesses int
	// Dir holds each sandbox's files, Dir/<id> (its upper layer and
	// /work), across restarts of the server ("": <home>/sandboxes, beside
	// the sessions' store).
	Dir string
	// Lifetime is a sandbox's when it asks for none (5m); MaxLifetime
	// bounds what it may ask for (24h).
	Lifetime, MaxLifetime time.Duration
	// DiskMB is a sandbox's disk when it asks for none (1 GiB); MaxDiskMB
	// bounds what it may ask for (16 GiB).
	DiskMB, MaxDiskMB int64
	// RingBytes bounds the output kept of each stream of each process
	// (1 MiB), SandboxRingBytes all of one sandbox's (16 MiB).
	RingBytes, SandboxRingBytes int64
	// KeepEnded is how long an ended process stays listed (1m);
	// Keepalive how often Events sends a keepalive when nothing happened
	// (15s).
	KeepEnded, Keepalive time.Duration
	// KeepFiles is how long the files of a sandbox that ended without a
	// kill (its server stopped, its init died) are kept to re-create it
	// on (DefaultKeepFiles); at most Max sandboxes' files are kept
	// (sandboxkeep.go).
	KeepFiles time.Duration
}

func (o SandboxOptions) withDefaults() SandboxOptions {
	orDefault(&o.Max, DefaultMaxSandboxes)
	orDefault(&o.MaxProcesses, DefaultMaxProcesses)
	orDefault(&o.DiskMB, DefaultSandboxDiskMB)
	orDefault(&o.MaxDiskMB, DefaultMaxSandboxDiskMB)
	orDefault(&o.RingBytes, DefaultRingBytes)
	orDefault(&o.SandboxRingBytes, DefaultSandboxRingBytes)
	orDefault(&o.Lifetime, DefaultSandboxLifetime)
	orDefault(&o.MaxLifetime, DefaultMaxLifetime)
	orDefault(&o.KeepEnded, DefaultKeepEnded)
	orDefault(&o.Keepalive, DefaultKeepalive)
	orDefault(&o.KeepFiles, DefaultKeepFiles)
	return o
}

// clock is the time of lifetimes and process timeouts (a fake in tests).
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) stopper
}

type stopper interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time                              { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// Live is a service's live sandboxes: api.Sandboxes. Its methods may be
// called concurrently.
type Live struct {
	s     *Service
	clock clock
	mu    sync.Mutex
	opts  SandboxOptions
	table map[string]*liveSandbox
	// starting counts sandboxes being created (they count against Max).
	starting int
	// gone says why a sandbox that is no longer in the table ended, for
	// later calls naming it (at most maxGone, the oldest forgotten).
	gone     map[string]string
	goneList []string
	closed   bool
	// sweep starts the sweep of kept files (once); stop ends it.
	sweep sync.Once
	stop  chan struct{}
}

var _ api.Sandboxes = (*Live)(nil)

func newLive(s *Service) *Live {
	return &Live{s: s, clock: realClock{}, opts: SandboxOptions{}.withDefaults(), table: map[string]*liveSandbox{}, gone: map[string]string{},
		stop: make(chan struct{})}
}

// Live is the service's live sandboxes.
func (s *Service) Live() *Live { return s.live }

// SetSandboxOptions sets the live sandboxes' options (the zero value of
// a field: its default).
// Setting them starts the sweep of ended sandboxes' kept files (now, and
// every hour: sandboxkeep.go).
func (s *Service) SetSandboxOptions(o SandboxOptions) {
	l := s.live
	l.mu.Lock()
	l.opts = o.withDefaults()
	closed := l.closed
	l.mu.Unlock()
	if !closed {
		l.sweep.Do(func() { go l.sweepLoop(l.stop) })
	}
}

// Close kills every live sandbox (their files stay in SandboxOptions.Dir:
// a later server re-creates a sandbox on them, see CreateSandbox) and
// refuses new ones.
func (s *Service) Close() error { return s.live.Close() }

// Close kills every sandbox and refuses new ones.
func (l *Live) Close() error {
	l.mu.Lock()
	if !l.closed {
		close(l.stop)
	}
	l.closed = true
	all := slices.Collect(maps.Values(l.table))
	l.mu.Unlock()
	var errs []error
	for _, sb := range all {
		if err := l.end(sb, "the server stopped", false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *Live) options() SandboxOptions {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opts
}

// dir is where sandboxes' files live.
func (l *Live) dir() string { return l.dirOf(l.options()) }

func (l *Live) dirOf(o SandboxOptions) string {
	if o.Dir != "" {
		return o.Dir
	}
	if l.s.ws == nil {
		return filepath.Join(os.TempDir(), "sandcell-sandboxes")
	}
	return filepath.Join(filepath.Dir(l.s.ws.Dir()), "sandboxes")
}

// liveSandbox is one sandbox of the table.
type liveSandbox struct {
	l     *Live
	st    *executor.StartedSandbox
	id    string
	info  api.SandboxInfo // what does not change: State, EndAt and Processes are filled in by snapshot
	shell []string
	// lock is the flock on its files held for its life (sandboxkeep.go).
	lock *os.File

	mu       sync.Mutex
	paused   bool
	expired  bool          // paused because its lifetime ended: a resume gives it lifetime again
	lifetime time.Duration // as last set
	endAt    time.Time     // while it runs
	left     time.Duration // while it is paused
	timer    stopper
	gen      int // the lifetime's generation: a timer of an older one does nothing
	ended    bool
	procs    map[int]*liveProc
	// endedProcs are the ended processes still listed, in the order they
	// ended (prune).
	endedProcs []*liveProc
	running    int // processes started that have not ended
	// startingProcs counts processes being started (they count against
	// MaxProcesses); ringBytes is what the processes' rings hold.
	startingProcs int
	ringBytes     int64
	followers     int // Events streams open
	// ids are the host uid and gid of the default user and of root, from
	// the owners of its home and of / (files.go), found on first use.
	ids *sandboxIDs
}

// newID is an unguessable sandbox id: "sb" and 18 characters of base 32
// (90 random bits), 20 lowercase letters and digits: the shape of E2B's
// ids, fit for a container's and a cgroup's name and a host name's label.
func newID() string {
	const digits = "abcdefghijklmnopqrstuvwxyz234567"
	var b [18]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	out := []byte("sb")
	for _, c := range b {
		out = append(out, digits[c&31])
	}
	return string(out)
}

// validID reports whether id has newID's shape (a caller's sandbox_id
// becomes a path and a container's name).
func validID(id string) bool {
	if len(id) != 20 || !strings.HasPrefix(id, "sb") {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

// CreateSandbox starts a live sandbox of spec. A spec whose Metadata has
// SandboxIDKey naming a sandbox that no longer runs but whose files are
// still in SandboxOptions.Dir (the server restarted, or its init died)
// re-creates that sandbox on its files, with the same id, from the
// template recorded then unless spec names one; its processes are gone,
// and its Notes say so.
func (l *Live) CreateSandbox(ctx context.Context, spec api.SandboxSpec) (api.SandboxInfo, error) {
	opts := l.options()
	life, diskMB, notes, err := checkSpec(&spec, opts)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	id, again, err := l.reserve(spec)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	added := false
	defer func() {
		if !added {
			l.mu.Lock()
			l.starting--
			l.mu.Unlock()
		}
	}()
	dir := filepath.Join(l.dir(), id)
	if again != nil {
		if spec.Template == "" && spec.Language == "" && spec.Image == "" {
			spec.Template, spec.Language, spec.Image = again.Template, again.Language, again.Image
		}
		if spec.Session == "" {
			spec.Session = again.Session
		}
		notes = append(notes, fmt.Sprintf("re-created on the files of sandbox %s from before: its processes are gone", id))
	}
	req := executor.SandboxRequest{Template: spec.Template, Language: spec.Language, Image: spec.Image, Limits: spec.Limits,
		Env: envList(spec.Env), Network: spec.Network, ID: id, UpperDir: dir, DiskBytes: diskMB << 20, User: sandboxUser, Home: sandboxHome,
		Admit: l.s.admit()}
	var st *executor.StartedSandbox
	var lock *os.File
	start := func() error {
		var busy bool
		if lock, busy, err = makeAndLock(dir, l.clock.Now()); busy {
			return api.Invalid(fmt.Sprintf("the files of sandbox %s are in use: another sandcell server sharing %s runs it, or removes them", id, l.dirOf(opts)))
		} else if err != nil {
			return fmt.Errorf("the sandbox's directory: %w", err)
		}
		st, err = l.s.exec.StartSandbox(ctx, req)
		return err
	}
	if spec.Session != "" {
		// A session's sandbox: /work starts as the session's files, copied
		// under the session's lock (as a kernel's start), so no run or
		// file tool of the session changes them half way.
		err = l.s.withSession(ctx, spec.Session, func(sess *workspace.Session) error {
			m := sess.Meta()
			if req.Template == "" && req.Language == "" && req.Image == "" {
				req.Language, req.Image = m.Language, m.Image
			}
			req.Workspace, req.WorkBytes, req.Installed = &sessionWork{sess: sess, log: l.s.log}, m.Quota, m.Deps
			return start()
		})
	} else {
		err = start()
	}
	if err != nil {
		if again == nil && lock != nil {
			_ = os.RemoveAll(dir)
		}
		if lock != nil {
			lock.Close()
		}
		return api.SandboxInfo{}, err
	}
	sb := &liveSandbox{l: l, st: st, id: id, procs: map[int]*liveProc{}, lifetime: life, lock: lock}
	sb.info = api.SandboxInfo{ID: id, Template: st.Template, Image: st.Image, Session: spec.Session,
		Metadata: maps.Clone(spec.Metadata), StartedAt: l.clock.Now(), OnExpire: spec.OnExpire,
		Limits: st.Limits.Request(), DiskMB: diskMB, Notes: append(notes, st.Notes...), User: sandboxUser, Home: sandboxHome}
	if st.Language.Name != "image" {
		sb.info.Language = st.Language.Name
	}
	sb.shell = sb.findShell()
	if root, err := st.Root(); err == nil {
		if ids, err := sb.hostIDs(root); err == nil { // while its home is as the backend made it
			if err := nameUser(root, ids); err != nil {
				l.s.log.Warn("the sandbox's user not named in /etc/passwd", "sandbox", id, "err", err)
			}
		}
		root.Close()
	}
	rec := spec
	rec.Metadata, rec.Env = nil, nil
	if b, err := json.Marshal(rec); err == nil {
		if err := os.WriteFile(filepath.Join(dir, recordFile), b, 0o600); err != nil {
			l.s.log.Warn("sandbox's record not written: it cannot be re-created on its template", "sandbox", id, "err", err)
		}
		now := l.clock.Now()
		_ = os.Chtimes(filepath.Join(dir, recordFile), now, now)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = st.Destroy()
		return api.SandboxInfo{}, errors.New("the server is stopping: no new sandbox")
	}
	l.starting--
	added = true
	l.table[id] = sb
	delete(l.gone, id)
	l.mu.Unlock()
	sb.mu.Lock()
	sb.arm(life)
	info := sb.snapshot()
	sb.mu.Unlock()
	go l.watch(sb)
	l.s.log.Info("live sandbox created", "sandbox", id, "template", st.Template)
	return info, nil
}

// checkSpec checks and completes a sandbox's spec: its lifetime (the
// default, clamped to the ceiling), disk, what happens at its end, its
// env and metadata.
func checkSpec(spec *api.SandboxSpec, opts SandboxOptions) (time.Duration, int64, []string, error) {
	var notes []string
	switch spec.OnExpire {
	case "":
		spec.OnExpire = api.OnExpireKill
	case api.OnExpireKill, api.OnExpirePause:
	default:
		return 0, 0, nil, api.Invalid(fmt.Sprintf("on_expire %q: it is %q or %q", spec.OnExpire, api.OnExpireKill, api.OnExpirePause))
	}
	if spec.LifetimeMS < 0 || spec.DiskMB < 0 {
		return 0, 0, nil, api.Invalid(fmt.Sprintf("lifetime_ms %d and disk_mb %d must not be negative", spec.LifetimeMS, spec.DiskMB))
	}
	life := time.Duration(spec.LifetimeMS) * time.Millisecond
	if life == 0 {
		life = opts.Lifetime
	}
	if life > opts.MaxLifetime {
		notes = append(notes, fmt.Sprintf("lifetime %s clamped to the server's ceiling %s", life, opts.MaxLifetime))
		life = opts.MaxLifetime
	}
	disk := spec.DiskMB
	if disk == 0 {
		disk = opts.DiskMB
	}
	if disk > opts.MaxDiskMB {
		notes = append(notes, fmt.Sprintf("disk_mb %d clamped to the server's ceiling %d", disk, opts.MaxDiskMB))
		disk = opts.MaxDiskMB
	}
	if err := checkEnv(spec.Env); err != nil {
		return 0, 0, nil, err
	}
	if len(spec.Metadata) > maxMetadata {
		return 0, 0, nil, api.Invalid(fmt.Sprintf("metadata has %d entries, at most %d", len(spec.Metadata), maxMetadata))
	}
	for k, v := range spec.Metadata {
		if len(k)+len(v) > maxMetadataBytes {
			return 0, 0, nil, api.Invalid(fmt.Sprintf("metadata %.40q is %d bytes with its value, at most %d", k, len(k)+len(v), maxMetadataBytes))
		}
	}
	return life, disk, notes, nil
}

// checkEnv refuses an environment a process cannot be given.
func checkEnv(env map[string]string) error {
	if len(env) > maxEnv {
		return api.Invalid(fmt.Sprintf("env has %d entries, at most %d", len(env), maxEnv))
	}
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return api.Invalid(fmt.Sprintf("env %.40q: a name is not empty and has no '=' or NUL, a value no NUL", k))
		}
	}
	return nil
}

// envList is env as KEY=VALUE, sorted by key.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// reserve takes a place for a new sandbox and gives its id: spec's
// SandboxIDKey when it names a sandbox of before (again is its record),
// else a new one.
func (l *Live) reserve(spec api.SandboxSpec) (id string, again *api.SandboxSpec, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return "", nil, errors.New("the server is stopping: no new sandbox")
	case len(l.table)+l.starting >= l.opts.Max:
		return "", nil, fmt.Errorf("%w: %d live sandboxes, the server's most (--max-sandboxes): kill one or wait", api.ErrBusy, l.opts.Max)
	}
	id = newID()
	if old, ok := spec.Metadata[SandboxIDKey]; ok {
		if !validID(old) {
			return "", nil, api.Invalid(fmt.Sprintf("metadata %s %.40q is no sandbox id", SandboxIDKey, old))
		}
		if l.table[old] != nil {
			return "", nil, api.Invalid(fmt.Sprintf("sandbox %s runs: only a sandbox that no longer runs is re-created", old))
		}
		b, err := os.ReadFile(filepath.Join(l.dirOf(l.opts), old, recordFile))
		if err != nil {
			return "", nil, api.NotFound(fmt.Sprintf("no files of a sandbox %s to re-create it on", old))
		}
		again = &api.SandboxSpec{}
		if err := json.Unmarshal(b, again); err != nil {
			return "", nil, fmt.Errorf("sandbox %s's record: %w", old, err)
		}
		id = old
	}
	l.starting++
	return id, again, nil
}

// watch removes the sandbox from the table when its init dies, keeping
// why for later calls.
func (l *Live) watch(sb *liveSandbox) {
	<-sb.st.Exited()
	l.mu.Lock()
	ours := l.table[sb.id] == sb
	l.mu.Unlock()
	if !ours {
		// Ended already (a kill, whose Destroy killed the init): asking
		// the backend why would read the cgroup's counters while Destroy
		// removes it, a concurrent map access in limits.ReadUsage that
		// killed the server.
		return
	}
	why := sb.st.DeathReason()
	if why == "" {
		why = "its init ended"
	}
	_ = l.end(sb, why, false)
}

// end removes sb from the table and destroys it; why is told to later
// calls naming it. remove also removes its files (a sandbox killed or
// expired: nothing of it remains); else they stay to re-create it on.
func (l *Live) end(sb *liveSandbox, why string, remove bool) error {
	l.mu.Lock()
	if l.table[sb.id] != sb {
		l.mu.Unlock()
		return nil // ended already (its init's death after a kill)
	}
	delete(l.table, sb.id)
	l.gone[sb.id] = why
	l.goneList = append(l.goneList, sb.id)
	if len(l.goneList) > maxGone {
		delete(l.gone, l.goneList[0])
		l.goneList = l.goneList[1:]
	}
	l.mu.Unlock()
	sb.mu.Lock()
	sb.ended = true
	if sb.timer != nil {
		sb.timer.Stop()
	}
	for _, p := range sb.procs {
		if p.exit == nil && p.reason == "" {
			p.reason = "sandbox killed"
		}
	}
	sb.mu.Unlock()
	var err error
	if remove && sb.info.Session != "" {
		err = l.saveWork(sb)
	}
	if derr := sb.st.Destroy(); derr != nil {
		err = errors.Join(err, fmt.Errorf("destroy sandbox %s: %w", sb.id, derr))
		l.s.log.Error("live sandbox not destroyed", "sandbox", sb.id, "err", derr)
	}
	if remove {
		if rerr := os.RemoveAll(filepath.Join(l.dir(), sb.id)); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove sandbox %s's files: %w", sb.id, rerr))
		}
	} else {
		// Kept: KeepFiles counts from now (sandboxkeep.go).
		now := l.clock.Now()
		_ = os.Chtimes(filepath.Join(l.dir(), sb.id, recordFile), now, now)
	}
	if sb.lock != nil {
		sb.lock.Close()
	}
	l.s.log.Info("live sandbox ended", "sandbox", sb.id, "why", why)
	return err
}

// saveWork makes a session's sandbox's /work the session's files again
// as it ends: frozen first, so that no process changes it while it is
// read, then saved under the session's lock as a run's /work is
// (untrusted: workspace.Session.Save reads it without following links).
func (l *Live) saveWork(sb *liveSandbox) error {
	sb.mu.Lock()
	perr := sb.pause()
	sb.mu.Unlock()
	if perr != nil {
		l.s.log.Warn("sandbox not frozen before its /work is saved", "sandbox", sb.id, "err", perr)
	}
	root, err := sb.st.Root()
	if err != nil {
		return fmt.Errorf("sandbox %s's /work not saved to session %s: %w", sb.id, sb.info.Session, err)
	}
	defer root.Close()
	// The sandbox's /work as the host reaches it: through its root's
	// handle, in its mount namespace.
	dir := fmt.Sprintf("/proc/self/fd/%d/work", root.Fd())
	err = l.s.locked(context.Background(), sb.info.Session, func(sess *workspace.Session) error {
		return (&sessionWork{sess: sess, log: l.s.log}).Save(dir)
	})
	if err != nil {
		return fmt.Errorf("sandbox %s's /work not saved to session %s: %w", sb.id, sb.info.Session, err)
	}
	return nil
}

// find is the sandbox named id as it is (paused or not); one that died
// is removed and named with why.
func (l *Live) find(id string) (*liveSandbox, error) {
	l.mu.Lock()
	sb, why := l.table[id], l.gone[id]
	l.mu.Unlock()
	if sb == nil {
		again := ""
		if validID(id) {
			if _, err := os.Stat(filepath.Join(l.dir(), id, recordFile)); err == nil {
				again = fmt.Sprintf("; its files are kept: create a sandbox with metadata %s %q to re-create it on them (its processes are gone)", SandboxIDKey, id)
			}
		}
		if why != "" {
			return nil, api.NotFound(fmt.Sprintf("sandbox %.40q ended: %s%s", id, why, again))
		}
		return nil, api.NotFound(fmt.Sprintf("no sandbox %.40q runs (see the list of sandboxes)%s", id, again))
	}
	select {
	case <-sb.st.Exited():
		why := sb.st.DeathReason()
		if why == "" {
			why = "its init ended"
		}
		_ = l.end(sb, why, false)
		return nil, api.NotFound(fmt.Sprintf("sandbox %s ended: %s", id, why))
	default:
	}
	return sb, nil
}

// get is the sandbox named id, resumed first if it is paused.
func (l *Live) get(id string) (*liveSandbox, error) {
	sb, err := l.find(id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if err := sb.resume(); err != nil {
		return nil, err
	}
	return sb, nil
}

// arm starts the lifetime clock: d from now (sb.mu held).
func (sb *liveSandbox) arm(d time.Duration) {
	sb.gen++
	gen := sb.gen
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.endAt = sb.l.clock.Now().Add(d)
	sb.timer = sb.l.clock.AfterFunc(d, func() { sb.expire(gen) })
}

// expire ends the lifetime of generation gen: the sandbox pauses or is
// killed, as its creator asked.
func (sb *liveSandbox) expire(gen int) {
	sb.mu.Lock()
	if gen != sb.gen || sb.paused || sb.ended {
		sb.mu.Unlock()
		return
	}
	if sb.info.OnExpire == api.OnExpirePause {
		if err := sb.pause(); err != nil {
			sb.l.s.log.Error("expired sandbox not paused: killed", "sandbox", sb.id, "err", err)
		} else {
			sb.expired = true
			sb.mu.Unlock()
			return
		}
	}
	sb.mu.Unlock()
	_ = sb.l.end(sb, "its lifetime ended", true)
}

// pause freezes the sandbox and stops its clock (sb.mu held).
func (sb *liveSandbox) pause() error {
	if sb.paused {
		return nil
	}
	if err := sb.st.Pause(); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", sb.id, err)
	}
	sb.gen++
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.left = max(sb.endAt.Sub(sb.l.clock.Now()), 0)
	sb.paused = true
	return nil
}

// resume thaws a paused sandbox and starts its clock again: with what
// was left of its lifetime, or (paused because it ended) its whole
// lifetime again (sb.mu held).
func (sb *liveSandbox) resume() error {
	if !sb.paused {
		return nil
	}
	if err := sb.st.Resume(); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", sb.id, err)
	}
	left := sb.left
	if sb.expired || left <= 0 {
		left = sb.lifetime
	}
	sb.paused, sb.expired = false, false
	sb.arm(left)
	return nil
}

// snapshot is the sandbox's info now (sb.mu held).
func (sb *liveSandbox) snapshot() api.SandboxInfo {
	info := sb.info
	info.Metadata = maps.Clone(info.Metadata)
	info.Notes = slices.Clone(info.Notes)
	info.State, info.EndAt = api.SandboxRunning, sb.endAt
	if sb.paused {
		info.State, info.EndAt = api.SandboxPaused, sb.l.clock.Now().Add(sb.left)
	}
	info.Processes = sb.running
	if sb.st.NetworkLog != nil {
		log := sb.st.NetworkLog()
		info.Network = &log
	}
	return info
}

// Sandboxes lists the live sandboxes, oldest first (paused ones stay
// paused).
func (l *Live) Sandboxes(ctx context.Context) ([]api.SandboxInfo, error) {
	l.mu.Lock()
	all := slices.Collect(maps.Values(l.table))
	l.mu.Unlock()
	out := make([]api.SandboxInfo, 0, len(all))
	for _, sb := range all {
		sb.mu.Lock()
		out = append(out, sb.snapshot())
		sb.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b api.SandboxInfo) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Sandbox is one sandbox's info. Looking does not resume it: its state
// stays what it is (every other call naming it resumes it).
func (l *Live) Sandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	sb, err := l.find(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.snapshot(), nil
}

// KillSandbox ends every process of it and removes all of it, its files
// too.
func (l *Live) KillSandbox(ctx context.Context, id string) error {
	sb, err := l.find(id)
	if err != nil {
		return err
	}
	return l.end(sb, "it was killed", true)
}

// SetSandboxLifetime sets its end to d from now (clamped to the
// server's ceiling), resuming it if it is paused.
func (l *Live) SetSandboxLifetime(ctx context.Context, id string, d time.Duration) (api.SandboxInfo, error) {
	if d <= 0 {
		return api.SandboxInfo{}, api.Invalid(fmt.Sprintf("a lifetime is more than 0 (asked: %s)", d))
	}
	sb, err := l.get(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	ceiling := l.options().MaxLifetime
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if d > ceiling {
		sb.info.Notes = append(sb.info.Notes, fmt.Sprintf("lifetime %s clamped to the server's ceiling %s", d, ceiling))
		d = ceiling
	}
	sb.lifetime = d
	sb.arm(d)
	return sb.snapshot(), nil
}

// PauseSandbox freezes it: its processes keep their memory and use no
// CPU; its lifetime clock stops. Any later call naming it resumes it.
func (l *Live) PauseSandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	sb, err := l.find(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if err := sb.pause(); err != nil {
		return api.SandboxInfo{}, err
	}
	return sb.snapshot(), nil
}

// ResumeSandbox thaws it (a running one is left as it is).
func (l *Live) ResumeSandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	sb, err := l.get(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.snapshot(), nil
}

// LiveSandboxes is how many sandboxes live (the metrics).
func (l *Live) LiveSandboxes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.table)
}
