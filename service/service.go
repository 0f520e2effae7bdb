package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/rootfs"
)

// Sentinel errors of the service's refusals, in class api.ErrInvalid.
var (
	// ErrNoSession: the session does not exist (closed, or expired), or
	// the id is not one.
	ErrNoSession = api.Invalid("unknown session")
	// ErrNeedSession: the request runs a file of a session and names
	// none.
	ErrNeedSession = api.Invalid("session_id required")
	// ErrSourceTaken: a program's source in a session would replace a
	// file of the session's /work (its language's source name).
	ErrSourceTaken = api.Invalid("the source file's name is taken")
)

// Service is mcp.Sandbox and mcp.Installer over an executor and the
// sessions' workspaces. Its methods may be called concurrently.
type Service struct {
	exec    Executor
	ws      *workspace.Store
	gate    *Gate
	log     *slog.Logger
	kernels *kernels // the sessions' live interpreters (kernel.go)
	live    *Live    // the live sandboxes (sandbox.go)
}

// New makes the service over the executor. gate admits its runs and
// installs (nil: no bound); log may be nil.
func New(exec *executor.Executor, ws *workspace.Store, gate *Gate, log *slog.Logger) *Service {
	return NewWith(wired{exec}, ws, gate, log)
}

// NewWith makes the service over any Executor (a fake in tests), as New.
func NewWith(exec Executor, ws *workspace.Store, gate *Gate, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{exec: exec, ws: ws, gate: gate, log: log}
	s.kernels = newKernels(s)
	s.live = newLive(s)
	return s
}

// Admit is the admission of every run of the server: the gate's Enter,
// or nil when there is no gate. It has the shape of
// executor.Request.Admit.
func (s *Service) Admit() func(context.Context) (func(), error) { return s.admit() }

// admit is the gate's Enter, or nil without a gate.
func (s *Service) admit() func(context.Context) (func(), error) {
	if s.gate == nil {
		return nil
	}
	return s.gate.Enter
}

// Execute runs one request. A session's run holds the session's lock (one
// run or file change at a time per session, so that a run's /work is
// saved whole); the gate admits it before its first sandbox.
func (s *Service) Execute(ctx context.Context, req api.Request) (api.Result, error) {
	er := executor.Request{Request: req, Admit: s.admit()}
	if req.SessionID == "" {
		if req.Script != "" {
			err := fmt.Errorf("%w: run_script runs a file of a session", ErrNeedSession)
			s.exec.Refused(req, err)
			return api.Result{}, err
		}
		return s.execute(ctx, er, nil)
	}
	var (
		res api.Result
		ran bool
	)
	err := s.locked(ctx, req.SessionID, func(sess *workspace.Session) error {
		ran = true
		work, err := s.inSession(&er, sess)
		if err != nil {
			return err
		}
		res, err = s.execute(ctx, er, work)
		return err
	})
	if err != nil && !ran {
		s.exec.Refused(req, err) // the session: unknown, or its lock not had
	}
	return res, err
}

// inSession makes er a run in sess: the session's image and language
// unless the request names its own, its files as /work, its quota and
// dependency sets.
func (s *Service) inSession(er *executor.Request, sess *workspace.Session) (*sessionWork, error) {
	m := sess.Meta()
	if er.Image == "" {
		er.Image = m.Image
	}
	// A session's language is the default of its runs, except for the
	// image's own program (run_command without a command).
	if er.Language == "" && er.Script == "" && (er.Image == "" || er.Command != nil || er.Source != nil) {
		er.Language = m.Language
	}
	work := &sessionWork{sess: sess, log: s.log}
	if er.Source != nil && er.Command == nil && er.Script == "" {
		// The program is written to /work/<its language's source name>:
		// never over a file of the session (issue #17: it silently
		// replaced the user's main.py), and not left behind
		// (sessionWork.Save removes it).
		l, err := rootfs.Lookup(er.Language)
		if err != nil {
			return nil, err
		}
		if _, err := sess.Stat(l.Source); !errors.Is(err, workspace.ErrNotFound) {
			return nil, fmt.Errorf("%w: execute_code writes the program to /work/%s, and session %s has a file of that name: "+
				"run it with run_script, or rename or delete it first", ErrSourceTaken, l.Source, m.ID)
		}
		work.source, work.sourceData = l.Source, er.Source
	}
	er.Workspace, er.WorkBytes, er.Installed = work, m.Quota, m.Deps
	return work, nil
}

// execute runs er and, in a session (work set), reports what the run
// changed in its /work.
func (s *Service) execute(ctx context.Context, er executor.Request, work *sessionWork) (api.Result, error) {
	res, err := s.exec.Execute(ctx, er)
	if err != nil {
		return api.Result{}, err
	}
	for _, n := range res.Notes {
		s.log.InfoContext(ctx, "limit clamped", "note", n)
	}
	if work != nil {
		res.Files = work.changes()
	}
	return res, nil
}

// session opens a session, with an error a model can act on.
func (s *Service) session(id string) (*workspace.Session, error) {
	sess, err := s.ws.Get(id)
	switch {
	case errors.Is(err, workspace.ErrNotFound):
		return nil, fmt.Errorf("%w %q: it does not exist: it was closed, or expired after being idle; create_session makes a new one", ErrNoSession, id)
	case errors.Is(err, workspace.ErrInvalid):
		return nil, fmt.Errorf("%w %q: it is not a session id (create_session returns one)", ErrNoSession, id)
	}
	return sess, err
}

// sessionWork is a session's workspace as a run's executor.Workspace. A
// compiled program saves twice (compile phase, run phase): the changes add
// up, a file created by the first and modified by the second is created.
type sessionWork struct {
	sess *workspace.Session
	log  *slog.Logger
	// source and sourceData: the program's file that the executor wrote
	// into /work (execute_code), removed before each save.
	source     string
	sourceData []byte
	mu         sync.Mutex
	all        []api.FileChange
	at         map[string]int // path -> index in all
}

func (w *sessionWork) Fill(dir string) error { return w.sess.Fill(dir) }

// Tree opens the session's tree for the runtime's fill helper, which
// copies it into /work from the run's cgroup (backend.TreeWorkspace).
func (w *sessionWork) Tree() (*os.File, error) { return w.sess.Tree() }

// Within says whether the session's tree is small enough for the runtime
// to copy in-process (backend.BoundedWorkspace).
func (w *sessionWork) Within(maxBytes int64, maxEntries int) (bool, error) {
	return w.sess.Within(maxBytes, maxEntries)
}

func (w *sessionWork) Save(dir string) error {
	if w.source != "" {
		if err := removeSource(dir, w.source, w.sourceData); err != nil {
			return err
		}
	}
	changes, skipped, err := w.sess.Save(dir)
	if len(skipped) > 0 {
		// FIFOs, sockets and device nodes are not kept between runs.
		w.log.Info("entries of /work not saved to the session", "session", w.sess.Meta().ID, "skipped", skipped)
	}
	if errors.Is(err, workspace.ErrQuota) || errors.Is(err, workspace.ErrInvalid) {
		return fmt.Errorf("%w: %w", executor.ErrWorkRefused, err)
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.add(changes)
	return nil
}

// add folds a save's changes into those of the earlier saves, in time
// linear in the changes (a map from path to its entry: 12,000 changed
// files must not cost a lookup each in a growing list).
func (w *sessionWork) add(changes []api.FileChange) {
	if w.at == nil {
		w.at = make(map[string]int, len(changes))
	}
	deleted := false
	for _, c := range changes {
		i, seen := w.at[c.Path]
		switch {
		case !seen:
			w.at[c.Path] = len(w.all)
			w.all = append(w.all, c)
		case w.all[i].Kind == api.Created && c.Kind == api.Deleted:
			w.all[i].Kind, deleted = "", true // created and gone: no change
			delete(w.at, c.Path)
		case w.all[i].Kind == api.Created:
			w.all[i].Size, w.all[i].Type = c.Size, c.Type
		default:
			w.all[i] = c
		}
	}
	if deleted {
		w.all = slices.DeleteFunc(w.all, func(c api.FileChange) bool { return c.Kind == "" })
		clear(w.at)
		for i, c := range w.all {
			w.at[c.Path] = i
		}
	}
}

// removeSource removes unsafeDir/name if it is a regular file holding
// data: the program's source as the executor wrote it. A file the program
// changed, or replaced with something else, is the program's and is kept.
// unsafeDir is the run's /work, the program's (no process of it is left:
// nothing changes under the check); nothing is followed out of it.
func removeSource(unsafeDir, name string, data []byte) error {
	root, err := os.OpenRoot(unsafeDir)
	if err != nil {
		return err
	}
	defer root.Close()
	st, err := root.Lstat(name)
	if err != nil || !st.Mode().IsRegular() || st.Size() != int64(len(data)) {
		return nil
	}
	got, err := root.ReadFile(name)
	if err != nil || !bytes.Equal(got, data) {
		return nil
	}
	return root.Remove(name)
}

func (w *sessionWork) changes() []api.FileChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.all)
}

// Languages lists the catalogue with what the layer store has built.
func (s *Service) Languages(context.Context) ([]mcp.LanguageInfo, error) {
	var out []mcp.LanguageInfo
	for _, l := range rootfs.Languages() {
		st, err := s.exec.Store().Status(l)
		if err != nil {
			return nil, err
		}
		out = append(out, mcp.LanguageInfo{Name: l.Name, Aliases: slices.Clone(l.Aliases), Version: st.Version,
			Compiled: l.Compiled(), Source: l.Source, Ready: st.Built, Image: l.Image, Wasm: l.OffersWasm(), Kernel: l.Kernel != nil})
	}
	return out, nil
}

// UnavailableLanguages lists the languages the judges sandcell stands in
// for offer that the catalogue cannot (mcp.Unavailable), with the reason.
func (s *Service) UnavailableLanguages(context.Context) ([]mcp.UnavailableInfo, error) {
	var out []mcp.UnavailableInfo
	for _, u := range rootfs.UnavailableLanguages() {
		out = append(out, mcp.UnavailableInfo{Name: u.Name, Reason: u.Reason})
	}
	return out, nil
}

// CreateSession makes a session for the calling client (mcp.ClientID):
// the store bounds the sessions in all and per client, and clamps ttl to
// its maximum (the returned ttl_seconds says what the session got).
func (s *Service) CreateSession(ctx context.Context, language string, ttl time.Duration) (mcp.SessionInfo, error) {
	if language != "" {
		l, err := rootfs.Lookup(language)
		if err != nil {
			return mcp.SessionInfo{}, err
		}
		language = l.Name
	}
	m, err := s.ws.CreateFor(mcp.ClientID(ctx), language, "", ttl)
	if err != nil {
		return mcp.SessionInfo{}, err
	}
	s.log.InfoContext(ctx, "session created", "session", m.ID, "language", m.Language, "ttl", m.TTL)
	return mcp.SessionInfo{SessionID: m.ID, Language: m.Language, Expires: m.LastUsed.Add(m.TTL),
		TTLSecs: int64(m.TTL / time.Second), QuotaB: m.Quota}, nil
}

// locked runs f on the session with its lock held: file changes wait for
// a run in progress to be saved instead of being overwritten by it. The
// session's kernels refresh their /work before their next cell.
func (s *Service) locked(ctx context.Context, id string, f func(*workspace.Session) error) error {
	defer s.kernels.changed(id)
	return s.withSession(ctx, id, f)
}

// withSession runs f on the session with its lock held.
func (s *Service) withSession(ctx context.Context, id string, f func(*workspace.Session) error) error {
	sess, err := s.session(id)
	if err != nil {
		return err
	}
	unlock, err := sess.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return f(sess)
}

func (s *Service) CloseSession(ctx context.Context, id string) error {
	return s.locked(ctx, id, func(*workspace.Session) error {
		s.log.InfoContext(ctx, "session closed", "session", id)
		s.kernels.sessionGone(id)
		return s.ws.Remove(id)
	})
}

func (s *Service) ResetSession(ctx context.Context, id string) error {
	return s.locked(ctx, id, func(sess *workspace.Session) error { return sess.Reset() })
}

func (s *Service) ListFiles(_ context.Context, id, path string, recursive bool) ([]api.FileEntry, error) {
	sess, err := s.session(id)
	if err != nil {
		return nil, err
	}
	entries, err := sess.List(path, recursive)
	return entries, fileError(path, err)
}

func (s *Service) ReadFile(_ context.Context, id, path string, offset, length int64) ([]byte, int64, error) {
	sess, err := s.session(id)
	if err != nil {
		return nil, 0, err
	}
	data, size, err := sess.Read(path, offset, length)
	return data, size, fileError(path, err)
}

func (s *Service) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) (api.FileEntry, bool, error) {
	var (
		e       api.FileEntry
		created bool
	)
	err := s.locked(ctx, id, func(sess *workspace.Session) error {
		_, statErr := sess.Stat(path)
		created = errors.Is(statErr, workspace.ErrNotFound)
		var err error
		e, err = sess.Write(path, data, fs.FileMode(mode))
		return fileError(path, err)
	})
	return e, created, err
}

func (s *Service) DeleteFile(ctx context.Context, id, path string) error {
	return s.locked(ctx, id, func(sess *workspace.Session) error { return fileError(path, sess.Delete(path)) })
}

func (s *Service) Describe(_ context.Context, id, path string) (string, error) {
	sess, err := s.session(id)
	if err != nil {
		return "", err
	}
	d, err := sess.Describe(path)
	return d, fileError(path, err)
}

// fileError words a workspace error for the model.
func fileError(path string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, workspace.ErrNotFound):
		return fmt.Errorf("%q: no such file in /work", path)
	}
	return err
}

// ExpireSessions removes idle sessions every minute until ctx ends, and
// stops idle kernels (and every kernel when ctx ends).
func (s *Service) ExpireSessions(ctx context.Context) {
	go s.kernels.expire(ctx)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.expireSessions()
		}
	}
}

// expireSessions removes the sessions idle past their TTL (not those in
// use: the store leaves a locked session alone).
func (s *Service) expireSessions() {
	ids, err := s.ws.Expire()
	if err != nil {
		s.log.Warn("expiring idle sessions", "err", err)
	}
	if len(ids) > 0 {
		s.log.Info("idle sessions expired", "sessions", ids)
	}
}
