package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Kernels: a session's live interpreters, one per language. The service
// keeps them here, starts one on a session's first cell of a language,
// and stops it when it is idle past KernelOptions.Idle, when its session
// is closed or expires, or on request. A kernel that died (memory limit,
// a crash, killed after an interrupt it did not answer) is replaced on
// the next call, and that call's result says plainly that the state was
// lost. A cell holds its session's lock, like a run: the kernel's /work is
// the session's, saved after each cell that changed it, and refilled
// before the next cell when another tool changed the session meanwhile.

// Defaults of KernelOptions' zero values.
const (
	DefaultMaxKernels  = 8
	DefaultKernelIdle  = 15 * time.Minute
	DefaultKernelGrace = 2 * time.Second
)

// KernelOptions configure a service's kernels. The zero value of each
// field is its default.
type KernelOptions struct {
	// Max is how many kernels may live at once, all sessions together
	// (--max-kernels, default 8); past it a new kernel is refused as busy.
	Max int
	// Idle is how long a kernel may go without a cell before it is
	// stopped (--kernel-idle, default 15m).
	Idle time.Duration
	// Grace is how long an interrupted cell (timeout, CPU budget, output
	// cap, cancellation) has to give its interpreter back before the
	// kernel is killed (default 2s).
	Grace time.Duration
	// TextCap is the most of each stream (and of the value) a result
	// shows inline (default 16 KiB); the whole text is saved in the
	// session past it.
	TextCap int
	// MaxPixels and MaxImageBytes bound one inline image (default 1.2
	// million pixels, 1 MiB); MaxImages and ImageTotal one result's
	// (default 8 images, 4 MiB).
	MaxPixels, MaxImageBytes, ImageTotal int64
	MaxImages                            int
}

func (o KernelOptions) withDefaults() KernelOptions {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.Max <= 0 {
		o.Max = DefaultMaxKernels
	}
	if o.Idle <= 0 {
		o.Idle = DefaultKernelIdle
	}
	if o.Grace <= 0 {
		o.Grace = DefaultKernelGrace
	}
	if o.TextCap <= 0 {
		o.TextCap = defaultTextCap
	}
	if o.MaxImages <= 0 {
		o.MaxImages = defaultMaxImages
	}
	def(&o.MaxPixels, defaultMaxPixels)
	def(&o.MaxImageBytes, defaultMaxImageBytes)
	def(&o.ImageTotal, defaultImageTotal)
	return o
}

// ErrKernelsBusy: --max-kernels kernels are live; in class api.ErrBusy.
var ErrKernelsBusy = &KernelsBusyError{}

// KernelsBusyError refuses a new kernel when the most allowed are live.
type KernelsBusyError struct {
	Live, Max int
	Idle      time.Duration
}

func (e *KernelsBusyError) Error() string {
	return fmt.Sprintf("busy: %d kernels are live, the most this server allows (--max-kernels %d); a kernel idle for %s is stopped, "+
		"and restart_kernel with stop true frees one now; execute_code still runs programs without a kernel", e.Live, e.Max, e.Idle)
}

// Is makes errors.Is(err, api.ErrBusy) and errors.Is(err, ErrKernelsBusy) hold.
func (e *KernelsBusyError) Is(target error) bool {
	return target == api.ErrBusy || target == ErrKernelsBusy
}

type kernelKey struct{ session, language string }

// kernelEntry is one live kernel of a session.
type kernelEntry struct {
	k        *executor.StartedKernel
	lastUsed time.Time
	busy     bool // a call uses it: the idle stop leaves it alone
	stale    bool // the session's files changed outside it: refill before its next cell
}

// kernels are a service's live kernels.
type kernels struct {
	s    *Service
	mu   sync.Mutex
	opts KernelOptions
	live map[kernelKey]*kernelEntry
	// gone says why a session's last kernel of a language ended, for the
	// next call's result.
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

// SetKernelOptions configures the service's kernels (before it serves).
func (s *Service) SetKernelOptions(o KernelOptions) {
	s.kernels.mu.Lock()
	s.kernels.opts = o.withDefaults()
	s.kernels.mu.Unlock()
}

// KernelOptions are the service's kernel settings (defaults filled in).
func (s *Service) KernelOptions() KernelOptions {
	s.kernels.mu.Lock()
	defer s.kernels.mu.Unlock()
	return s.kernels.opts
}

// LiveKernels is how many kernels live now.
func (s *Service) LiveKernels() int {
	s.kernels.mu.Lock()
	defer s.kernels.mu.Unlock()
	return len(s.kernels.live)
}

// kernelLanguage is a cell's language: named, else the session's if it
// has a kernel, else python.
func kernelLanguage(name, session string) (rootfs.Language, error) {
	if name == "" {
		name = "python"
		if l, err := rootfs.Lookup(session); session != "" && err == nil && l.Kernel != nil {
			name = l.Name
		}
	}
	return executor.KernelLanguage(name)
}

// RunCell runs one cell in the session's kernel of its language, starting
// the kernel first if there is none (or it died, or Restart asks). An
// error is a refusal: an unknown session or language, a language without
// a kernel, bad limits, --max-kernels reached; a kernel that failed to
// start or died is a result.
func (s *Service) RunCell(ctx context.Context, req api.CellRequest) (api.CellResult, error) {
	if req.SessionID == "" {
		return api.CellResult{}, fmt.Errorf("%w: a kernel belongs to a session (create_session makes one)", ErrNeedSession)
	}
	if len(req.Code) > executor.MaxSourceBytes {
		return api.CellResult{}, fmt.Errorf("%w: the cell is %d bytes, at most %d", executor.ErrTooLarge, len(req.Code), executor.MaxSourceBytes)
	}
	var res api.CellResult
	err := s.withSession(ctx, req.SessionID, func(sess *workspace.Session) error {
		lang, err := kernelLanguage(req.Language, sess.Meta().Language)
		if err != nil {
			return err
		}
		lim, notes, err := s.exec.CellLimits(lang, req.Limits)
		if err != nil {
			return err
		}
		release, err := s.enter(ctx)
		if err != nil {
			return err
		}
		defer release()
		work := &sessionWork{sess: sess, log: s.log}
		e, info, more, err := s.kernels.acquire(ctx, sess, lang, req, work)
		if errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrBusy) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			// sandcell failed to start the kernel: a result, not a refusal.
			res = api.CellResult{Status: api.StatusInternalError, SessionID: req.SessionID, Message: "the kernel did not start: " + err.Error(),
				Kernel: api.KernelInfo{Language: lang.Name}, Files: work.changes()}
			return nil
		}
		res = s.kernels.run(ctx, sess, e, info, lim, req, work)
		res.Notes = append(append(notes, more...), res.Notes...)
		return nil
	})
	return res, err
}

// enter takes a slot of the gate (a cell runs like a run; an idle kernel
// holds none); without a gate it admits at once.
func (s *Service) enter(ctx context.Context) (release func(), err error) {
	if s.gate == nil {
		return func() {}, nil
	}
	return s.gate.Enter(ctx)
}

// acquire returns the session's live kernel of lang, marked busy, or
// starts one (Restart: a new one in any case). A kernel that failed to
// start is an error wrapping oci.ErrRuntime.
func (ks *kernels) acquire(ctx context.Context, sess *workspace.Session, lang rootfs.Language, req api.CellRequest, work *sessionWork) (*kernelEntry, api.KernelInfo, []string, error) {
	key := kernelKey{sess.Meta().ID, lang.Name}
	ks.mu.Lock()
	e := ks.live[key]
	previous := ""
	if e != nil && (req.Restart || !e.k.Alive()) {
		previous = "it was restarted on request"
		if !e.k.Alive() {
			previous = e.k.DeathReason()
		}
		delete(ks.live, key)
		ks.mu.Unlock()
		e.k.Destroy()
		ks.mu.Lock()
		e = nil
	}
	if e != nil {
		e.busy = true
		stale := e.stale
		e.stale = false
		ks.mu.Unlock()
		var notes []string
		if req.Limits.MemoryMB > 0 || req.Limits.Pids > 0 {
			notes = append(notes, fmt.Sprintf("memory_mb and pids apply when a kernel starts: this one keeps %s and %d pids (restart to change them)",
				limits.FormatSize(e.k.Limits.MemoryBytes), e.k.Limits.Pids))
		}
		if stale {
			if err := e.k.Refill(work); err != nil {
				ks.release(key, e, false, "")
				e.k.Destroy()
				return nil, api.KernelInfo{}, nil, fmt.Errorf("refreshing the kernel's /work from the session: %w", err)
			}
		}
		return e, api.KernelInfo{Language: lang.Name, Version: e.k.Ready().Version}, notes, nil
	}
	if previous == "" {
		previous = ks.gone[key]
	}
	delete(ks.gone, key)
	if n := len(ks.live) + ks.starting; n >= ks.opts.Max {
		ks.mu.Unlock()
		ks.reapDead()
		ks.mu.Lock()
		if n := len(ks.live) + ks.starting; n >= ks.opts.Max {
			err := &KernelsBusyError{Live: n, Max: ks.opts.Max, Idle: ks.opts.Idle}
			ks.mu.Unlock()
			return nil, api.KernelInfo{}, nil, err
		}
	}
	ks.starting++
	ks.mu.Unlock()
	m := sess.Meta()
	k, err := ks.s.exec.StartKernel(ctx, executor.KernelRequest{Language: lang.Name, Limits: req.Limits, Image: m.Image,
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
	e = &kernelEntry{k: k, lastUsed: time.Now(), busy: true}
	ks.live[key] = e
	ks.mu.Unlock()
	ks.s.log.Info("kernel started", "session", key.session, "language", key.language, "kernel", k.String())
	return e, api.KernelInfo{Language: lang.Name, Version: k.Ready().Version, New: true, Previous: previous}, k.Notes, nil
}

// release hands a kernel back after a call; a kernel that is gone is
// forgotten (why says why, for the next call).
func (ks *kernels) release(key kernelKey, e *kernelEntry, alive bool, why string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	e.busy = false
	e.lastUsed = time.Now()
	if !alive && ks.live[key] == e {
		delete(ks.live, key)
		if why != "" {
			ks.gone[key] = why
		}
	}
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

// reply is a kernel driver's reply, as the service reads it (untrusted:
// every field is checked or only shown).
type reply struct {
	Status         string         `json:"status"`
	Value          *string        `json:"value"`
	ValueType      string         `json:"value_type"`
	Error          *api.CellError `json:"error"`
	Interrupted    bool           `json:"interrupted"`
	ExecutionCount int            `json:"execution_count"`
	Display        []struct {
		Kind   string `json:"kind"`
		Path   string `json:"path"`
		Text   string `json:"text"`
		Note   string `json:"note"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
	} `json:"display"`
}

// run runs one cell on a kernel acquire returned and builds its result:
// the verdict, the texts shaped to the text cap (whole texts saved in the
// session), the images within the budget, /work saved, and the kernel
// released or, when it died, destroyed.
func (ks *kernels) run(ctx context.Context, sess *workspace.Session, e *kernelEntry, info api.KernelInfo, lim limits.Set, req api.CellRequest, work *sessionWork) api.CellResult {
	key := kernelKey{sess.Meta().ID, e.k.Language.Name}
	opts := ks.options()
	n := ks.nextCell(sess)
	cell := oci.KernelCell{
		Command: map[string]any{"code": string(req.Code), "cell": n, "outputs": outputsDir, "max_pixels": opts.MaxPixels},
		Timeout: lim.Timeout, CPUTime: lim.CPUTime, Grace: opts.Grace, OutputBytes: lim.OutputBytes, OnOutput: req.Output,
	}
	o := e.k.Exec(ctx, cell)
	var r reply
	if o.Reply != nil {
		if err := json.Unmarshal(o.Reply, &r); err != nil && o.Err == nil {
			o.Err = fmt.Errorf("the kernel's reply is not valid: %v", err)
		}
	}
	replyErr := r.Status == "error"
	status, msg, kept := oci.KernelVerdict(o, cell, e.k.Limits.MemoryBytes, replyErr)
	res := api.CellResult{Status: status, Message: msg, SessionID: key.session,
		StdoutTruncated: o.StdoutTruncated, StderrTruncated: o.StderrTruncated,
		ExecutionTimeMS: o.Elapsed.Milliseconds(), CPUTimeMS: o.CPUTime.Milliseconds(), MemoryPeakBytes: o.MemoryPeakBytes}
	if replyErr && r.Error != nil {
		res.Error = r.Error
	}
	// Texts past the cap: head and tail inline, the whole in the session.
	var files []api.File
	shape := func(text, what string) (string, string) {
		name := fmt.Sprintf("%s/cell%d-%s.txt", outputsDir, n, what)
		shown, cut := shapeText(text, opts.TextCap, name)
		if !cut {
			return text, ""
		}
		files = append(files, api.File{Path: name, Data: []byte(text), Mode: 0o644})
		return shown, name
	}
	cutNote := fmt.Sprintf("\n[sandcell: output truncated at %d bytes]", lim.OutputBytes)
	if o.StdoutTruncated {
		o.Stdout += cutNote
	}
	if o.StderrTruncated {
		o.Stderr += cutNote
	}
	res.Stdout, res.StdoutFile = shape(o.Stdout, "stdout")
	res.Stderr, res.StderrFile = shape(o.Stderr, "stderr")
	if r.Value != nil {
		res.Value, res.ValueFile = shape(oci.CleanText([]byte(*r.Value)), "value")
		res.ValueType = truncateRunes(oci.CleanText([]byte(r.ValueType)), 200)
	}
	res.Display = ks.display(e.k, r, opts)

	// /work to the session: the cell's changes and the whole texts. A
	// dead kernel's /work is saved too (it is intact until Destroy), as a
	// killed run's is.
	if _, err := e.k.Save(work, files); err != nil {
		var m string
		if errors.Is(err, oci.ErrWorkRefused) {
			m = fmt.Sprintf("the session did not keep this cell's /work: %v %s", err, notSavedCell)
			if res.Status == api.StatusOK {
				res.Status = api.StatusError
			}
		} else {
			m = fmt.Sprintf("saving /work to the session failed: %v %s", err, notSavedCell)
			res.Status = api.StatusInternalError
		}
		res.Message = joinSentences(res.Message, m)
		res.StdoutFile, res.StderrFile, res.ValueFile = "", "", ""
	}
	res.Files = work.changes()

	info.Alive = kept && e.k.Alive()
	info.ExecutionCount = r.ExecutionCount
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
		if o.Killed && o.Err == nil {
			why = "it did not recover from an interrupt within " + opts.Grace.String() + " and was killed"
		}
		e.k.Destroy()
		ks.s.log.Info("kernel ended", "session", key.session, "language", key.language, "why", why)
	}
	ks.release(key, e, info.Alive, why)
	return res
}

// notSavedCell ends the message of a cell whose /work was not saved.
const notSavedCell = "(the session keeps its files from before this cell; the kernel's /work still has them)"

// display turns the driver's display items into the result's: texts
// cleaned, images checked against the budget (read from the kernel's
// /work, never through a link).
func (ks *kernels) display(k *executor.StartedKernel, r reply, opts KernelOptions) []api.Display {
	b := &imageBudget{maxPixels: opts.MaxPixels, maxBytes: opts.MaxImageBytes, total: opts.ImageTotal, maxImages: opts.MaxImages}
	var out []api.Display
	for _, d := range r.Display {
		if len(out) >= 64 {
			break
		}
		switch d.Kind {
		case "text":
			out = append(out, api.Display{Kind: "text", Text: truncateRunes(oci.CleanText([]byte(d.Text)), opts.TextCap)})
		case "image":
			data, err := k.ReadFile(d.Path, opts.MaxImageBytes)
			if errors.Is(err, oci.ErrInvalidRequest) {
				continue // not a clean path inside /work: nothing to show
			}
			item := api.Display{Kind: "image", Path: d.Path}
			b.admit(&item, data, err)
			if n := oci.CleanText([]byte(d.Note)); n != "" && item.Inline {
				item.Note = truncateRunes(n, 300)
			}
			out = append(out, item)
		}
	}
	return out
}

// truncateRunes cuts s to at most n bytes on a character boundary.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

func joinSentences(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return strings.TrimSuffix(a, ".") + "; " + b
}

func (ks *kernels) options() KernelOptions {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.opts
}

// RestartKernel stops the session's kernel of language ("": python, or
// the session's) and, unless stop, starts a new one with lim (memory_mb,
// pids). It returns the new kernel's info (stop: the old one's, not
// alive).
func (s *Service) RestartKernel(ctx context.Context, sessionID, language string, stop bool, lim api.Limits) (api.KernelInfo, error) {
	var info api.KernelInfo
	err := s.withSession(ctx, sessionID, func(sess *workspace.Session) error {
		lang, err := kernelLanguage(language, sess.Meta().Language)
		if err != nil {
			return err
		}
		key := kernelKey{sessionID, lang.Name}
		ks := s.kernels
		if stop {
			found := ks.stop(func(k kernelKey) bool { return k == key }, "it was stopped on request")
			info = api.KernelInfo{Language: lang.Name}
			if found == 0 {
				return fmt.Errorf("session %s has no live %s kernel", sessionID, lang.Name)
			}
			return nil
		}
		release, err := s.enter(ctx)
		if err != nil {
			return err
		}
		defer release()
		work := &sessionWork{sess: sess, log: s.log}
		e, i, _, err := ks.acquire(ctx, sess, lang, api.CellRequest{Restart: true, Limits: lim}, work)
		if err != nil {
			return err
		}
		i.Alive = e.k.Alive()
		info = i
		ks.release(key, e, i.Alive, "")
		return nil
	})
	return info, err
}

// stop destroys the kernels whose key match says so (not those in use: a
// closed session's kernels are in use only while its lock is held, which
// its caller holds), recording why; it returns how many.
func (ks *kernels) stop(match func(kernelKey) bool, why string) int {
	ks.mu.Lock()
	var victims []*kernelEntry
	for key, e := range ks.live {
		if match(key) && !e.busy {
			victims = append(victims, e)
			delete(ks.live, key)
			ks.gone[key] = why
		}
	}
	ks.mu.Unlock()
	for _, e := range victims {
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
	var dead []*kernelEntry
	for key, e := range ks.live {
		if !e.busy && !e.k.Alive() {
			dead = append(dead, e)
			delete(ks.live, key)
			ks.gone[key] = e.k.DeathReason()
		}
	}
	ks.mu.Unlock()
	for _, e := range dead {
		e.k.Destroy()
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
}
