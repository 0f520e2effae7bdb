package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// sandbox is mcp.Sandbox over the app: runs through the load gate, and
// the sessions' workspaces (internal/workspace) as their persistent /work.
type sandbox struct {
	a    *app
	ws   *workspace.Store
	gate *gate
}

// Execute runs one request. A session's run holds the session's lock (one
// run or file change at a time per session, so that a run's /work is
// saved whole) and then a slot of the gate.
func (s *sandbox) Execute(ctx context.Context, req mcp.ExecuteRequest) (mcp.ExecuteResult, error) {
	er := execRequest{
		Language:  req.Language,
		Source:    req.Source,
		Command:   req.Command,
		Script:    req.Script,
		Args:      req.Args,
		Stdin:     req.Stdin,
		Limits:    req.Limits,
		Isolation: req.Isolation,
		OnOutput:  req.Output,
	}
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		er.Env = append(er.Env, k+"="+req.Env[k])
	}
	for _, f := range req.Files {
		er.Files = append(er.Files, oci.File{Path: f.Path, Data: f.Data, Mode: fs.FileMode(f.Mode)})
	}
	var work *sessionWork
	if req.SessionID != "" {
		sess, err := s.session(req.SessionID)
		if err != nil {
			return mcp.ExecuteResult{}, err
		}
		unlock, err := sess.Lock(ctx)
		if err != nil {
			return mcp.ExecuteResult{}, err
		}
		defer unlock()
		if er.Language == "" && er.Script == "" {
			er.Language = sess.Meta().Language
		}
		work = &sessionWork{sess: sess, log: s.a.log}
		er.Workspace, er.WorkBytes = work, sess.Meta().Quota
	} else if req.Script != "" {
		return mcp.ExecuteResult{}, errors.New("run_script runs a file of a session: give session_id")
	}
	deps, err := s.runDeps(ctx, er, req.SessionID, req.Dependencies)
	if err != nil {
		return mcp.ExecuteResult{}, err
	}
	if deps != nil {
		er.Mounts, er.Env = deps.mount(), append(er.Env, deps.env...)
	}
	leave, err := s.gate.enter(ctx)
	if err != nil {
		return mcp.ExecuteResult{}, err
	}
	res, notes, err := s.a.execute(ctx, er)
	leave()
	for _, n := range notes {
		s.a.log.Info("limit clamped", "note", n)
	}
	if err != nil && res.Status == "" {
		return mcp.ExecuteResult{}, err
	}
	out := toMCPResult(res)
	if work != nil {
		out.Files = work.changes()
	}
	return out, nil
}

// session opens a session, with an error a model can act on.
func (s *sandbox) session(id string) (*workspace.Session, error) {
	sess, err := s.ws.Get(id)
	switch {
	case errors.Is(err, workspace.ErrNotFound):
		return nil, fmt.Errorf("session %q does not exist: it was closed, or expired after being idle; create_session makes a new one", id)
	case errors.Is(err, workspace.ErrInvalid):
		return nil, fmt.Errorf("%q is not a session id (create_session returns one)", id)
	}
	return sess, err
}

// sessionWork is a session's workspace as a run's oci.Workspace. A
// compiled program saves twice (compile phase, run phase): the changes add
// up, a file created by the first and modified by the second is created.
type sessionWork struct {
	sess *workspace.Session
	log  *slog.Logger
	mu   sync.Mutex
	all  []mcp.FileChange
}

func (w *sessionWork) Fill(dir string) error { return w.sess.Fill(dir) }

func (w *sessionWork) Save(dir string) error {
	changes, skipped, err := w.sess.Save(dir)
	if len(skipped) > 0 {
		// FIFOs, sockets and device nodes are not kept between runs.
		w.log.Info("entries of /work not saved to the session", "session", w.sess.Meta().ID, "skipped", skipped)
	}
	if errors.Is(err, workspace.ErrQuota) || errors.Is(err, workspace.ErrInvalid) {
		return fmt.Errorf("%w: %w", oci.ErrWorkRefused, err)
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range changes {
		i := slices.IndexFunc(w.all, func(o mcp.FileChange) bool { return o.Path == c.Path })
		fc := mcp.FileChange{Path: c.Path, Kind: c.Kind, Type: c.Type, Size: c.Size}
		switch {
		case i < 0:
			w.all = append(w.all, fc)
		case w.all[i].Kind == "created" && c.Kind == "deleted":
			w.all = slices.Delete(w.all, i, i+1)
		case w.all[i].Kind == "created":
			w.all[i].Size, w.all[i].Type = fc.Size, fc.Type
		default:
			w.all[i] = fc
		}
	}
	return nil
}

func (w *sessionWork) changes() []mcp.FileChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.all)
}

func (s *sandbox) Languages(context.Context) ([]mcp.LanguageInfo, error) {
	var out []mcp.LanguageInfo
	for _, l := range rootfs.Languages() {
		st, err := s.a.store.Status(l)
		if err != nil {
			return nil, err
		}
		out = append(out, mcp.LanguageInfo{Name: l.Name, Aliases: slices.Clone(l.Aliases), Version: st.Version,
			Compiled: l.Compiled(), Source: l.Source, Ready: st.Built})
	}
	return out, nil
}

func (s *sandbox) CreateSession(_ context.Context, language string, ttl time.Duration) (mcp.SessionInfo, error) {
	if language != "" {
		l, err := rootfs.Lookup(language)
		if err != nil {
			return mcp.SessionInfo{}, err
		}
		language = l.Name
	}
	m, err := s.ws.Create(language, ttl)
	if err != nil {
		return mcp.SessionInfo{}, err
	}
	s.a.log.Info("session created", "session", m.ID, "language", m.Language, "ttl", m.TTL)
	return sessionInfo(m), nil
}

func sessionInfo(m workspace.Meta) mcp.SessionInfo {
	return mcp.SessionInfo{SessionID: m.ID, Language: m.Language, Expires: m.LastUsed.Add(m.TTL),
		TTLSecs: int64(m.TTL / time.Second), QuotaB: m.Quota}
}

// locked runs f on the session with its lock held: file changes wait for
// a run in progress to be saved instead of being overwritten by it.
func (s *sandbox) locked(ctx context.Context, id string, f func(*workspace.Session) error) error {
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

func (s *sandbox) CloseSession(ctx context.Context, id string) error {
	return s.locked(ctx, id, func(*workspace.Session) error {
		s.a.log.Info("session closed", "session", id)
		installs.forget(id)
		return s.ws.Remove(id)
	})
}

func (s *sandbox) ResetSession(ctx context.Context, id string) error {
	return s.locked(ctx, id, func(sess *workspace.Session) error { return sess.Reset() })
}

func (s *sandbox) ListFiles(_ context.Context, id, path string, recursive bool) ([]mcp.FileEntry, error) {
	sess, err := s.session(id)
	if err != nil {
		return nil, err
	}
	entries, err := sess.List(path, recursive)
	if err != nil {
		return nil, fileError(path, err)
	}
	out := make([]mcp.FileEntry, len(entries))
	for i, e := range entries {
		out[i] = fileEntry(e)
	}
	return out, nil
}

func fileEntry(e workspace.Entry) mcp.FileEntry {
	return mcp.FileEntry{Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode, MTime: e.MTime, Target: e.Target}
}

func (s *sandbox) ReadFile(_ context.Context, id, path string, offset, length int64) ([]byte, int64, error) {
	sess, err := s.session(id)
	if err != nil {
		return nil, 0, err
	}
	data, size, err := sess.Read(path, offset, length)
	return data, size, fileError(path, err)
}

func (s *sandbox) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) (mcp.FileEntry, bool, error) {
	var (
		e       workspace.Entry
		created bool
	)
	err := s.locked(ctx, id, func(sess *workspace.Session) error {
		_, statErr := sess.Stat(path)
		created = errors.Is(statErr, workspace.ErrNotFound)
		var err error
		e, err = sess.Write(path, data, fs.FileMode(mode))
		return fileError(path, err)
	})
	return fileEntry(e), created, err
}

func (s *sandbox) DeleteFile(ctx context.Context, id, path string) error {
	return s.locked(ctx, id, func(sess *workspace.Session) error { return fileError(path, sess.Delete(path)) })
}

func (s *sandbox) Describe(_ context.Context, id, path string) (string, error) {
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
