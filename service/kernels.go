package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/limits"
)

// The live kernels of all sessions: which one serves a cell, when one is
// started, replaced, refreshed, released and stopped.

type kernelKey struct{ session, language string }

// kernelEntry is one live kernel of a session.
type kernelEntry struct {
	k        Kernel
	sess     *workspace.Session // whose meta records the kernel (recordKernel)
	limits   limits.Set         // the kernel's sandbox's, for its whole life
	lastUsed time.Time
	busy     bool // a call uses it: the idle stop leaves it alone
	stale    bool // the session's files changed outside it: refill before its next cell
	// cells counts the cells the kernel was given, for a result without
	// the driver's count (a kernel killed in a cell sends no reply).
	// Only the call that holds the kernel touches it.
	cells int
}

// kernels are a service's live kernels.
type kernels struct {
	s    *Service
	mu   sync.Mutex
	opts KernelOptions
	live map[kernelKey]*kernelEntry
	// gone says why a session's last kernel of a language ended, for the
	// next call's result; the session's meta has it too (recordKernel),
	// for a server started later.
	gone     map[kernelKey]string
	starting int
	// cells numbers a session's cells (outputs/cellN-*), across its
	// kernels.
	cells map[string]int
}

func newKernels(s *Service) *kernels {
	return &kernels{s: s, opts: KernelOptions{}.withDefaults(), live: map[kernelKey]*kernelEntry{},
		gone: map[kernelKey]string{}, cells: map[string]int{}}
}

func (ks *kernels) options() KernelOptions {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.opts
}

// acquire returns the session's live kernel of key's language, marked
// busy, or starts one (Restart: a new one in any case). A kernel that
// failed to start is an error that is no refusal (api.ErrInvalid,
// api.ErrBusy).
func (ks *kernels) acquire(ctx context.Context, sess *workspace.Session, key kernelKey, req api.CellRequest, work *sessionWork) (*kernelEntry, api.KernelInfo, []string, error) {
	e, stale, previous := ks.take(key, req.Restart)
	if e == nil {
		return ks.start(ctx, sess, key, req.Limits, work, previous)
	}
	var notes []string
	if req.Limits.MemoryMB > 0 || req.Limits.Pids > 0 {
		notes = append(notes, fmt.Sprintf("memory_mb and pids apply when a kernel starts: this one keeps %s and %d pids (restart to change them)",
			limits.FormatSize(e.limits.MemoryBytes), e.limits.Pids))
	}
	if stale {
		if err := e.k.Refill(work); err != nil {
			ks.release(key, e, false, "")
			e.k.Destroy()
			return nil, api.KernelInfo{}, nil, fmt.Errorf("refreshing the kernel's /work from the session: %w", err)
		}
	}
	return e, api.KernelInfo{Language: key.language, Version: e.k.Version()}, notes, nil
}

// take marks the live kernel of key busy and returns it, with whether the
// session's files changed outside it. A dead kernel, or any with restart,
// is destroyed instead: take returns no kernel and says why the previous
// one is gone.
func (ks *kernels) take(key kernelKey, restart bool) (e *kernelEntry, stale bool, previous string) {
	ks.mu.Lock()
	e = ks.live[key]
	if e == nil {
		ks.mu.Unlock()
		return nil, false, ""
	}
	if alive := e.k.Alive(); restart || !alive {
		previous = "it was restarted on request"
		if !alive {
			previous = e.k.DeathReason()
		}
		delete(ks.live, key)
		ks.mu.Unlock()
		e.k.Destroy()
		ks.recordKernel(e.sess, key, previous)
		return nil, false, previous
	}
	e.busy = true
	stale, e.stale = e.stale, false
	ks.mu.Unlock()
	return e, stale, ""
}

// start starts a kernel for key, marked busy; previous says why the
// session's last kernel of the language is gone ("": as recorded, in
// memory or in the session's meta).
func (ks *kernels) start(ctx context.Context, sess *workspace.Session, key kernelKey, lim api.Limits, work *sessionWork, previous string) (*kernelEntry, api.KernelInfo, []string, error) {
	m := sess.Meta()
	ks.mu.Lock()
	if previous == "" {
		previous = ks.gone[key]
	}
	if recorded, ok := m.Kernels[key.language]; previous == "" && ok {
		// Recorded by an earlier server: one still live then ended
		// with that server, killed or stopped without a word.
		previous = cmp.Or(recorded, serverRestarted)
	}
	delete(ks.gone, key)
	ks.mu.Unlock()
	if err := ks.reserve(); err != nil {
		return nil, api.KernelInfo{}, nil, err
	}
	st, err := ks.s.exec.StartKernel(ctx, executor.KernelRequest{Language: key.language, Limits: lim, Image: m.Image,
		Workspace: work, WorkBytes: m.Quota, Installed: m.Deps})
	ks.mu.Lock()
	ks.starting--
	if err != nil {
		if previous != "" {
			ks.gone[key] = previous
		}
		ks.mu.Unlock()
		return nil, api.KernelInfo{}, nil, err
	}
	e := &kernelEntry{k: st.Kernel, sess: sess, limits: st.Limits, lastUsed: time.Now(), busy: true}
	ks.live[key] = e
	ks.mu.Unlock()
	ks.recordKernel(sess, key, "")
	ks.s.log.Info("kernel started", "session", key.session, "language", key.language, "kernel", e.k.String())
	return e, api.KernelInfo{Language: key.language, Version: e.k.Version(), New: true, Previous: previous}, st.Notes, nil
}

// reserve counts a kernel about to start, or refuses it when --max-kernels
// live or are starting (after forgetting those that died meanwhile).
func (ks *kernels) reserve() error {
	ks.mu.Lock()
	if len(ks.live)+ks.starting >= ks.opts.Max {
		ks.mu.Unlock()
		ks.reapDead()
		ks.mu.Lock()
	}
	defer ks.mu.Unlock()
	if n := len(ks.live) + ks.starting; n >= ks.opts.Max {
		return &KernelsBusyError{Live: n, Max: ks.opts.Max, Idle: ks.opts.Idle}
	}
	ks.starting++
	return nil
}

// release hands a kernel back after a call; a kernel that is gone is
// forgotten (why says why, for the next call; "": its death reason).
func (ks *kernels) release(key kernelKey, e *kernelEntry, alive bool, why string) {
	ks.mu.Lock()
	e.busy = false
	e.lastUsed = time.Now()
	gone := !alive && ks.live[key] == e
	if gone {
		delete(ks.live, key)
		why = cmp.Or(why, e.k.DeathReason())
		ks.gone[key] = why
	}
	ks.mu.Unlock()
	if gone {
		ks.recordKernel(e.sess, key, why)
	}
}

// serverRestarted is why a kernel that an earlier server left live on
// record is gone.
const serverRestarted = "the server restarted"

// recordKernel records in the session's meta that its kernel of key's
// language is live (why "") or why it ended, so that a server started
// later says why the state was lost (issue #37); a session removed
// meanwhile needs no record.
func (ks *kernels) recordKernel(sess *workspace.Session, key kernelKey, why string) {
	if sess == nil {
		return
	}
	if err := sess.SetKernel(key.language, why); err != nil && !errors.Is(err, workspace.ErrNotFound) {
		ks.s.log.Warn("kernel not recorded in the session's meta", "session", key.session, "language", key.language, "error", err)
	}
}

// run runs one cell (its code, limits and output callback) on a kernel
// acquire returned and builds its result (cellout.go): the verdict, the
// texts and images shaped, /work saved. The kernel is then released or,
// when it died, destroyed.
func (ks *kernels) run(ctx context.Context, sess *workspace.Session, key kernelKey, e *kernelEntry, info api.KernelInfo, cell executor.Cell, work *sessionWork) api.CellResult {
	opts := ks.options()
	cell.Number, cell.Outputs, cell.MaxPixels, cell.Grace = ks.nextCell(sess), outputsDir, opts.MaxPixels, opts.Grace
	// A kernel this call started has no earlier state: its verdict must
	// not claim one was kept beside "a new kernel was started" (issue #37).
	cell.First = info.New
	e.cells++
	o := e.k.RunCell(ctx, cell)
	res, files := shapeCell(o, cell.Number, opts)
	res.SessionID = key.session
	res.Display = display(e.k, o.Reply, opts)
	// /work to the session: the cell's changes and the whole texts. A
	// dead kernel's /work is saved too (it is intact until Destroy), as a
	// killed run's is.
	if _, err := e.k.Save(work, files); err != nil {
		notSaved(&res, err)
	}
	res.Files = work.changes()

	info.Alive = o.Kept && e.k.Alive()
	info.ExecutionCount = o.Reply.ExecutionCount
	if info.ExecutionCount == 0 {
		// No reply (the kernel died or was killed): the cells it ran,
		// this one included, not 0 (issue #37).
		info.ExecutionCount = e.cells
	}
	if info.New {
		started := "a new " + info.Language + " kernel was started for this call"
		if info.Previous != "" {
			started += " (the previous one is gone: " + info.Previous + ")"
		}
		res.Message = joinSentences(started+": nothing defined by earlier calls exists in it", res.Message)
	}
	res.Kernel = info
	why := ""
	if !info.Alive {
		why = e.k.DeathReason()
		if o.Unresponsive {
			why = "it did not recover from an interrupt within " + opts.Grace.String() + " and was killed"
		}
		e.k.Destroy()
		ks.s.log.Info("kernel ended", "session", key.session, "language", key.language, "why", why)
	}
	ks.release(key, e, info.Alive, why)
	return res
}

// nextCell numbers a session's next cell: one more than the highest
// number among the session's outputs (so that a new kernel, or a server
// restart, does not overwrite the figures of earlier cells).
func (ks *kernels) nextCell(sess *workspace.Session) int {
	id := sess.Meta().ID
	ks.mu.Lock()
	n, ok := ks.cells[id]
	ks.mu.Unlock()
	if !ok {
		entries, _ := sess.List(outputsDir, false)
		for _, en := range entries {
			if m := cellFileRE.FindStringSubmatch(en.Path); m != nil {
				if v, err := strconv.Atoi(m[1]); err == nil && v < 1<<30 {
					n = max(n, v)
				}
			}
		}
	}
	n++
	ks.mu.Lock()
	ks.cells[id] = n
	ks.mu.Unlock()
	return n
}

var cellFileRE = regexp.MustCompile(`^` + outputsDir + `/cell([0-9]{1,9})-`)

// stop destroys the kernels whose key match says so (not those in use: a
// closed session's kernels are in use only while its lock is held, which
// its caller holds), recording why; it returns how many.
func (ks *kernels) stop(match func(kernelKey) bool, why string) int {
	ks.mu.Lock()
	victims := map[kernelKey]*kernelEntry{}
	for key, e := range ks.live {
		if match(key) && !e.busy {
			victims[key] = e
			delete(ks.live, key)
			ks.gone[key] = why
		}
	}
	ks.mu.Unlock()
	for key, e := range victims {
		// Recorded first: a server that stops may exit before the
		// kernel is destroyed.
		if why != "" {
			ks.recordKernel(e.sess, key, why)
		}
		e.k.Destroy()
	}
	return len(victims)
}

// sessionGone forgets a closed session's kernels and numbering.
func (ks *kernels) sessionGone(id string) {
	ks.stop(func(k kernelKey) bool { return k.session == id }, "")
	ks.mu.Lock()
	for key := range ks.gone {
		if key.session == id {
			delete(ks.gone, key)
		}
	}
	delete(ks.cells, id)
	ks.mu.Unlock()
}

// changed marks a session's kernels stale: another tool changed its files.
func (ks *kernels) changed(id string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for key, e := range ks.live {
		if key.session == id {
			e.stale = true
		}
	}
}

// reapDead forgets the kernels that died between calls (not in use).
func (ks *kernels) reapDead() {
	ks.mu.Lock()
	dead := map[kernelKey]*kernelEntry{}
	for key, e := range ks.live {
		if !e.busy && !e.k.Alive() {
			dead[key] = e
			delete(ks.live, key)
			ks.gone[key] = e.k.DeathReason()
		}
	}
	ks.mu.Unlock()
	for key, e := range dead {
		e.k.Destroy()
		ks.recordKernel(e.sess, key, e.k.DeathReason())
	}
}

// expire stops idle kernels and those whose session is gone, until ctx
// ends, and all of them then.
func (ks *kernels) expire(ctx context.Context) {
	tick := min(max(ks.options().Idle/4, 50*time.Millisecond), 30*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			ks.stop(func(kernelKey) bool { return true }, "the server stopped")
			return
		case <-t.C:
		}
		ks.sweep()
	}
}

// sweep is one round of expire: idle kernels stopped, the kernels of
// sessions that are gone stopped, dead kernels forgotten.
func (ks *kernels) sweep() {
	opts := ks.options()
	now := time.Now()
	ks.mu.Lock()
	var idle, orphans []kernelKey
	for key, e := range ks.live {
		if !e.busy && now.Sub(e.lastUsed) > opts.Idle {
			idle = append(idle, key)
		} else if !e.busy {
			orphans = append(orphans, key)
		}
	}
	ks.mu.Unlock()
	n := ks.stop(func(k kernelKey) bool { return slices.Contains(idle, k) }, "it was stopped after being idle for "+opts.Idle.String())
	if n > 0 {
		ks.s.log.Info("idle kernels stopped", "kernels", n)
	}
	// A session that expired (or was removed behind the service's
	// back) takes its kernels with it.
	for _, key := range orphans {
		if _, err := ks.s.ws.Get(key.session); errors.Is(err, workspace.ErrNotFound) {
			ks.sessionGone(key.session)
		}
	}
	ks.reapDead()
	ks.mu.Lock()
	if len(ks.gone) > 10000 {
		clear(ks.gone) // bounded: a very old reason is not worth the memory
	}
	ks.mu.Unlock()
}
