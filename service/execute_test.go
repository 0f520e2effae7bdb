package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/rootfs"
)

// A session's run: its /work is the session's files, its language the
// session's, what it changed is reported and kept, and the program's
// source (execute_code) is not left behind.
func TestExecuteInSession(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("py")
	e.write(id, "data.txt", "input")
	e.exec.run = func(_ context.Context, req executor.Request, work string) (api.Result, error) {
		in, err := os.ReadFile(filepath.Join(work, "data.txt"))
		if err != nil {
			return api.Result{}, err
		}
		if err := os.WriteFile(filepath.Join(work, "out.txt"), append(in, "!"...), 0o644); err != nil {
			return api.Result{}, err
		}
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "done"}, Notes: []string{"clamped"}}, nil
	}
	res, err := e.s.Execute(e.ctx, api.Request{SessionID: id, Source: []byte("print(1)")})
	if err != nil {
		t.Fatal(err)
	}
	want := []api.FileChange{{Path: "out.txt", Kind: api.Created, Type: "file", Size: 6}}
	if res.Stdout != "done" || !slices.Equal(res.Files, want) {
		t.Errorf("result %+v, want stdout done and files %+v", res, want)
	}
	req := e.exec.requests[0]
	if req.Language != "python" || req.WorkBytes != workspace.DefaultQuota || req.Workspace == nil {
		t.Errorf("the executor got language %q, work bytes %d, workspace %v: want the session's", req.Language, req.WorkBytes, req.Workspace)
	}
	if got, ok := e.read(id, "out.txt"); !ok || got != "input!" {
		t.Errorf("out.txt in the session: %q %v", got, ok)
	}
	if _, ok := e.read(id, "main.py"); ok {
		t.Error("the program's source main.py was left in the session")
	}

	// A source of the session's own name is refused, and nothing runs.
	e.write(id, "main.py", "mine")
	_, err = e.s.Execute(e.ctx, api.Request{SessionID: id, Source: []byte("print(2)")})
	if !errors.Is(err, ErrSourceTaken) || !errors.Is(err, api.ErrInvalid) {
		t.Errorf("execute_code over the session's main.py: %v, want ErrSourceTaken", err)
	}
	if len(e.exec.requests) != 1 {
		t.Errorf("%d requests reached the executor, want 1", len(e.exec.requests))
	}
	if got, _ := e.read(id, "main.py"); got != "mine" {
		t.Errorf("the session's main.py is %q, want it kept", got)
	}
	// A program that rewrote its own source keeps it: it is the program's.
	e.exec.run = func(_ context.Context, req executor.Request, work string) (api.Result, error) {
		return okResult(), os.WriteFile(filepath.Join(work, "main.js"), []byte("changed"), 0o644)
	}
	if _, err := e.s.Execute(e.ctx, api.Request{SessionID: id, Language: "javascript", Source: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.read(id, "main.js"); got != "changed" {
		t.Errorf("main.js that the program rewrote: %q, want kept", got)
	}
}

// A run without a session gets no workspace and reports no files; one
// that runs a session's script needs a session.
func TestExecuteWithoutSession(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	res, err := e.s.Execute(e.ctx, api.Request{Language: "python", Source: []byte("1")})
	if err != nil || res.Status != api.StatusOK || res.Files != nil {
		t.Errorf("one-shot run: %+v, %v", res, err)
	}
	if e.exec.requests[0].Workspace != nil {
		t.Error("a one-shot run got a workspace")
	}
	_, err = e.s.Execute(e.ctx, api.Request{Script: "main.py"})
	if !errors.Is(err, ErrNeedSession) || len(e.exec.refused) != 1 || !errors.Is(e.exec.refused[0], ErrNeedSession) {
		t.Errorf("run_script without a session: %v (refused %v), want ErrNeedSession, told to the executor", err, e.exec.refused)
	}
	// The executor's refusal is the service's.
	e.exec.run = func(context.Context, executor.Request, string) (api.Result, error) {
		return api.Result{Phase: api.Phase{Stdout: "x"}}, executor.ErrLanguage
	}
	if res, err := e.s.Execute(e.ctx, api.Request{Source: []byte("1")}); !errors.Is(err, executor.ErrLanguage) || res.Stdout != "" {
		t.Errorf("refused by the executor: %+v, %v", res, err)
	}
}

// An unknown, closed or malformed session is refused before anything
// runs, and the metrics hear of it.
func TestUnknownSession(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("")
	if err := e.s.CloseSession(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{id, "s-nosuchsession", "../etc"} {
		_, err := e.s.Execute(e.ctx, api.Request{SessionID: sid, Command: []string{"ls"}})
		if !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "create_session") {
			t.Errorf("session %q: %v, want ErrNoSession", sid, err)
		}
		if _, err := e.s.ListFiles(e.ctx, sid, "", false); !errors.Is(err, ErrNoSession) {
			t.Errorf("list_files in %q: %v", sid, err)
		}
		if _, _, err := e.s.WriteFile(e.ctx, sid, "a", nil, 0o644); !errors.Is(err, ErrNoSession) {
			t.Errorf("write_file in %q: %v", sid, err)
		}
	}
	if len(e.exec.requests) != 0 || len(e.exec.refused) != 3 {
		t.Errorf("%d requests ran, %d refusals told: want 0 and 3", len(e.exec.requests), len(e.exec.refused))
	}
	if _, err := e.s.CreateSession(e.ctx, "nosuchlanguage", 0); err == nil {
		t.Error("a session of an unknown language was made")
	}
}

// The file tools, and what a session's run sees of them.
func TestSessionFiles(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	info, err := e.s.CreateSession(e.ctx, "python", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id := info.SessionID
	if info.Language != "python" || info.TTLSecs != 3600 || info.QuotaB != workspace.DefaultQuota {
		t.Errorf("session info %+v", info)
	}
	_, created, err := e.s.WriteFile(e.ctx, id, "d/a.txt", []byte("one"), 0o644)
	if err != nil || !created {
		t.Fatalf("first write: created %v, %v", created, err)
	}
	if _, created, _ := e.s.WriteFile(e.ctx, id, "d/a.txt", []byte("two"), 0o644); created {
		t.Error("a second write of d/a.txt says it created it")
	}
	entries, err := e.s.ListFiles(e.ctx, id, "", true)
	if err != nil || len(entries) != 2 || entries[1].Path != "d/a.txt" {
		t.Errorf("list: %+v, %v", entries, err)
	}
	if data, size, err := e.s.ReadFile(e.ctx, id, "d/a.txt", 1, 0); string(data) != "wo" || size != 3 || err != nil {
		t.Errorf("read from 1: %q %d %v", data, size, err)
	}
	if d, err := e.s.Describe(e.ctx, id, "d/a.txt"); err != nil || d == "" {
		t.Errorf("describe: %q %v", d, err)
	}
	if _, _, err := e.s.ReadFile(e.ctx, id, "nope", 0, 0); err == nil || !strings.Contains(err.Error(), `"nope": no such file in /work`) {
		t.Errorf("read of a missing file: %v", err)
	}
	if _, err := e.s.Describe(e.ctx, id, "nope"); err == nil {
		t.Error("describe of a missing file")
	}
	if err := e.s.DeleteFile(e.ctx, id, "d/a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DeleteFile(e.ctx, id, "d/a.txt"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("second delete: %v", err)
	}
	e.write(id, "b.txt", "b")
	if err := e.s.ResetSession(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	if entries, _ := e.s.ListFiles(e.ctx, id, "", true); len(entries) != 0 {
		t.Errorf("after reset: %+v", entries)
	}
	if _, err := e.s.ListFiles(e.ctx, "s-nosuchsession", "", true); !errors.Is(err, ErrNoSession) {
		t.Errorf("list in no session: %v", err)
	}
	if _, _, err := e.s.ReadFile(e.ctx, "s-nosuchsession", "a", 0, 0); !errors.Is(err, ErrNoSession) {
		t.Errorf("read in no session: %v", err)
	}
	if _, err := e.s.Describe(e.ctx, "s-nosuchsession", "a"); !errors.Is(err, ErrNoSession) {
		t.Errorf("describe in no session: %v", err)
	}
}

// One session's calls are serialised by its lock: a file change waits for
// the run in progress to be saved, and gives up with its caller.
func TestSessionLock(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("python")
	running, finish := make(chan struct{}), make(chan struct{})
	e.exec.run = func(_ context.Context, _ executor.Request, work string) (api.Result, error) {
		close(running)
		<-finish
		return okResult(), os.WriteFile(filepath.Join(work, "a.txt"), []byte("run"), 0o644)
	}
	ran := make(chan error, 1)
	go func() {
		_, err := e.s.Execute(e.ctx, api.Request{SessionID: id, Command: []string{"true"}})
		ran <- err
	}()
	<-running
	wrote := make(chan error, 1)
	go func() {
		_, _, err := e.s.WriteFile(e.ctx, id, "a.txt", []byte("tool"), 0o644)
		wrote <- err
	}()
	short, cancel := context.WithTimeout(e.ctx, 20*time.Millisecond)
	defer cancel()
	if err := e.s.DeleteFile(short, id, "a.txt"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a delete while the run holds the lock: %v, want the caller's deadline", err)
	}
	select {
	case err := <-wrote:
		t.Fatalf("write_file did not wait for the run: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	close(finish)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got, _ := e.read(id, "a.txt"); got != "tool" {
		t.Errorf("a.txt is %q: want the write that came after the run", got)
	}
}

// A run whose /work the session refuses (over its quota) fails as the
// program's error, and the session keeps its files from before.
func TestRefusedWorkKeepsFiles(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{Quota: 64 << 10})
	id := e.session("python")
	e.write(id, "keep.txt", "kept")
	e.exec.run = func(_ context.Context, _ executor.Request, work string) (api.Result, error) {
		os.Remove(filepath.Join(work, "keep.txt"))
		return okResult(), os.WriteFile(filepath.Join(work, "big"), make([]byte, 1<<20), 0o644)
	}
	res, err := e.s.Execute(e.ctx, api.Request{SessionID: id, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(e.exec.saveErr, executor.ErrWorkRefused) || !errors.Is(e.exec.saveErr, workspace.ErrQuota) {
		t.Errorf("save over the quota: %v, want ErrWorkRefused wrapping ErrQuota", e.exec.saveErr)
	}
	if res.Status != api.StatusError || len(res.Files) != 0 {
		t.Errorf("result %+v: want error and no changes", res)
	}
	if got, ok := e.read(id, "keep.txt"); got != "kept" || !ok {
		t.Errorf("keep.txt after a refused save: %q %v", got, ok)
	}
	if _, ok := e.read(id, "big"); ok {
		t.Error("the refused file is in the session")
	}
}

// Idle sessions expire; one in use is left to its holder.
func TestSessionExpiry(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	e := newEnv(t, nil, workspace.Options{TTL: time.Minute, Now: clock})
	idle, busy := e.session("python"), e.session("python")
	sess, err := e.ws.Get(busy)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := sess.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	e.s.expireSessions()
	if _, err := e.s.Execute(e.ctx, api.Request{SessionID: idle, Command: []string{"true"}}); !errors.Is(err, ErrNoSession) {
		t.Errorf("a run in the expired session: %v, want ErrNoSession", err)
	}
	// The session in use keeps its files while its holder works.
	if _, err := sess.Write("x.txt", []byte("x"), 0o644); err != nil {
		t.Errorf("the session locked while others expired: %v", err)
	}
	unlock()
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	e.s.ExpireSessions(ctx) // returns when ctx is done
}

// The gate: --max-runs runs at once, --max-queue waiting, past both
// refused as busy; a caller that gives up while queued leaves the queue.
func TestGateThroughExecute(t *testing.T) {
	gate := NewGate(1, 1)
	e := newEnv(t, gate, workspace.Options{})
	if e.s.Admit() == nil {
		t.Fatal("Admit is nil with a gate")
	}
	running, finish := make(chan struct{}, 1), make(chan struct{})
	e.exec.run = func(context.Context, executor.Request, string) (api.Result, error) {
		running <- struct{}{}
		<-finish
		return okResult(), nil
	}
	first := make(chan error, 1)
	go func() {
		_, err := e.s.Execute(e.ctx, api.Request{Command: []string{"true"}})
		first <- err
	}()
	<-running
	qctx, cancelQueued := context.WithCancel(e.ctx)
	queued := make(chan error, 1)
	go func() {
		_, err := e.s.Execute(qctx, api.Request{Command: []string{"true"}})
		queued <- err
	}()
	for gate.Queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	if n := e.s.Runs(); n != 2 {
		t.Errorf("runs in flight: %d, want 2 (one running, one queued)", n)
	}
	_, err := e.s.Execute(e.ctx, api.Request{Command: []string{"true"}})
	var busy *api.BusyError
	if !errors.As(err, &busy) || busy.Running != 1 || busy.Waiting != 1 {
		t.Errorf("a third run: %v, want busy (1 running, 1 waiting)", err)
	}
	// A cell is admitted by the same gate.
	id := e.session("python")
	if _, err := e.s.RunCell(e.ctx, api.CellRequest{SessionID: id, Code: []byte("1")}); !errors.Is(err, api.ErrBusy) {
		t.Errorf("a cell past the gate: %v, want busy", err)
	}
	cancelQueued()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Errorf("the queued run, cancelled: %v", err)
	}
	if n := e.s.Runs(); n != 1 || gate.Queued() != 0 {
		t.Errorf("after the cancel: %d in flight, %d queued; want 1 and 0", n, gate.Queued())
	}
	close(finish)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := e.s.Runs(); n != 0 {
		t.Errorf("after the run: %d in flight", n)
	}
	// No gate: no bound, nothing counted.
	free := newEnv(t, nil, workspace.Options{})
	if free.s.Admit() != nil || free.s.Runs() != 0 {
		t.Error("a service without a gate admits through one")
	}
}

// Installs: a session's later installs build on its set, which its meta
// keeps; without a session nothing is recorded.
func TestInstallDependencies(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	res, err := e.s.InstallDependencies(e.ctx, mcp.InstallRequest{Language: "py", Packages: []string{"six"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Language != "python" || !slices.Equal(res.Requirements, []string{"six"}) || res.Layer != "layer-1" ||
		res.MountPath != rootfs.DepsDir || res.Output != "installed" || res.SessionID != "" {
		t.Errorf("install without a session: %+v", res)
	}
	id := e.session("python")
	for _, pkg := range []string{"a", "b"} {
		if _, err := e.s.InstallDependencies(e.ctx, mcp.InstallRequest{SessionID: id, Language: "python", Packages: []string{pkg}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.exec.installs[2].Installed["python"]; !slices.Equal(got, []string{"a"}) {
		t.Errorf("the second install in the session got installed %v, want [a]", got)
	}
	sess, err := e.ws.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if got := sess.Meta().Deps["python"]; !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("the session's python set %v, want [a b]", got)
	}
	// A run in the session mounts the set.
	if _, err := e.s.Execute(e.ctx, api.Request{SessionID: id, Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if got := e.exec.requests[0].Installed["python"]; !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("the run got installed %v", got)
	}
	// A failed install records nothing and is the caller's error.
	e.exec.install = func(executor.InstallRequest) (*executor.Deps, error) { return nil, executor.ErrInstallsOff }
	if _, err := e.s.InstallDependencies(e.ctx, mcp.InstallRequest{SessionID: id, Language: "python", Packages: []string{"c"}}); !errors.Is(err, executor.ErrInstallsOff) {
		t.Errorf("a refused install: %v", err)
	}
	sess, _ = e.ws.Get(id)
	if got := sess.Meta().Deps["python"]; len(got) != 2 {
		t.Errorf("after a refused install the set is %v", got)
	}
	if _, err := e.s.InstallDependencies(e.ctx, mcp.InstallRequest{SessionID: "s-nosuchsession", Language: "python"}); !errors.Is(err, ErrNoSession) {
		t.Errorf("install in no session: %v", err)
	}
	if langs := installLanguages(); !slices.Contains(langs, "python") || !slices.Contains(langs, "py") {
		t.Errorf("install languages %v", langs)
	}
}

// Images and image sessions: a run in one gets the image and, with no
// program of its own, the image's program (not the session's language).
func TestImages(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	e.exec.store.images["tool"] = rootfs.Image{Name: "tool", Layers: []string{"l1", "l2"}, Bytes: 100,
		Config: rootfs.ImageConfig{Env: []string{"A=1"}, Entrypoint: []string{"/bin/tool"}, Cmd: []string{"--help"}}}
	imgs, err := e.s.Images(e.ctx)
	if err != nil || len(imgs) != 1 || imgs[0].Name != "tool" || imgs[0].Layers != 2 || imgs[0].Entrypoint[0] != "/bin/tool" {
		t.Errorf("images: %+v, %v", imgs, err)
	}
	if _, err := e.s.CreateImageSession(e.ctx, "python", "nosuchimage", 0); err == nil {
		t.Error("a session of an image not imported was made")
	}
	if _, err := e.s.CreateImageSession(e.ctx, "nosuchlanguage", "tool", 0); err == nil {
		t.Error("a session of an unknown language was made")
	}
	info, err := e.s.CreateImageSession(e.ctx, "py", "tool", 0)
	if err != nil || info.Image != "tool" || info.Language != "python" {
		t.Fatalf("image session: %+v, %v", info, err)
	}
	if _, err := e.s.Execute(e.ctx, api.Request{SessionID: info.SessionID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Execute(e.ctx, api.Request{SessionID: info.SessionID, Command: []string{"ls"}}); err != nil {
		t.Fatal(err)
	}
	own, cmd := e.exec.requests[0], e.exec.requests[1]
	if own.Image != "tool" || own.Language != "" || cmd.Image != "tool" || cmd.Language != "python" {
		t.Errorf("the image's program: image %q language %q; a command: image %q language %q", own.Image, own.Language, cmd.Image, cmd.Language)
	}
	langs, err := e.s.Languages(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(langs, func(l mcp.LanguageInfo) bool { return l.Name == "python" })
	if i < 0 || !langs[i].Ready || langs[i].Version != "3.11.2" || !langs[i].Kernel {
		t.Errorf("python in languages: %+v", langs)
	}
	if j := slices.IndexFunc(langs, func(l mcp.LanguageInfo) bool { return l.Name == "c" }); j < 0 || langs[j].Ready {
		t.Errorf("c (not built) in languages: %+v", langs)
	}
}

// TestUnavailableLanguages: list_languages gets the catalogue's
// unavailable languages from the service, each with its reason, none of
// them among the languages (issue #42).
func TestUnavailableLanguages(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	un, ok := mcp.Sandbox(e.s).(mcp.Unavailable)
	if !ok {
		t.Fatal("the service does not list the unavailable languages")
	}
	got, err := un.UnavailableLanguages(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rootfs.UnavailableLanguages()) {
		t.Errorf("%d unavailable languages, the catalogue has %d", len(got), len(rootfs.UnavailableLanguages()))
	}
	i := slices.IndexFunc(got, func(u mcp.UnavailableInfo) bool { return u.Name == "swift" })
	if i < 0 || !strings.Contains(got[i].Reason, "Debian") {
		t.Errorf("swift: %+v, want it with the reason", got)
	}
	langs, err := e.s.Languages(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range got {
		if slices.ContainsFunc(langs, func(l mcp.LanguageInfo) bool { return l.Name == u.Name }) {
			t.Errorf("%s is both a language and unavailable", u.Name)
		}
	}
}
