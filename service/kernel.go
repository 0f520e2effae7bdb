package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
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
	// shows inline (default 16 KiB); the text, as far as it was captured
	// (up to the output limit), is saved in the session past it.
	TextCap int
	// MaxPixels and MaxImageBytes bound one inline image (default 1.2
	// million pixels, 1 MiB); MaxImages and ImageTotal one result's
	// (default 8 images, 4 MiB).
	MaxPixels, MaxImageBytes, ImageTotal int64
	MaxImages                            int
}

func (o KernelOptions) withDefaults() KernelOptions {
	orDefault(&o.Max, DefaultMaxKernels)
	orDefault(&o.Idle, DefaultKernelIdle)
	orDefault(&o.Grace, DefaultKernelGrace)
	orDefault(&o.TextCap, defaultTextCap)
	orDefault(&o.MaxImages, defaultMaxImages)
	orDefault(&o.MaxPixels, defaultMaxPixels)
	orDefault(&o.MaxImageBytes, defaultMaxImageBytes)
	orDefault(&o.ImageTotal, defaultImageTotal)
	return o
}

// orDefault sets an option that is not positive (its zero value) to
// its default.
func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
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

// SetKernelOptions configures the service's kernels (before it serves).
func (s *Service) SetKernelOptions(o KernelOptions) {
	s.kernels.mu.Lock()
	s.kernels.opts = o.withDefaults()
	s.kernels.mu.Unlock()
}

// KernelOptions are the service's kernel settings (defaults filled in).
func (s *Service) KernelOptions() KernelOptions { return s.kernels.options() }

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
		key := kernelKey{req.SessionID, lang.Name}
		e, info, more, err := s.kernels.acquire(ctx, sess, key, req, work)
		if errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrBusy) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			// sandcell failed to start the kernel: a result, not a refusal.
			res = api.CellResult{Status: api.StatusInternalError, SessionID: req.SessionID, Message: "the kernel did not start: " + err.Error(),
				Kernel: api.KernelInfo{Language: lang.Name}, Files: work.changes()}
			return nil
		}
		res = s.kernels.run(ctx, sess, key, e, info, executor.Cell{Code: req.Code, Limits: lim, OnOutput: req.Output}, work)
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
		e, i, _, err := ks.acquire(ctx, sess, key, api.CellRequest{Restart: true, Limits: lim}, work)
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
