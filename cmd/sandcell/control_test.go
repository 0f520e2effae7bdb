package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/health"
)

// fakeServer listens on a control socket in an instance directory of
// the state dir (0711 and 0600, as serve makes them) and counts the
// connections it accepts: a refused socket must get none.
func fakeServer(t *testing.T, state string) (path string, accepted *atomic.Int32) {
	t.Helper()
	inst := filepath.Join(state, "1.2.3.4")
	if err := os.Mkdir(inst, 0o711); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(inst, controlSocketName)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return path, accepted
}

// socketDir is a directory for a control socket (0700, this user's),
// short enough for a unix socket's path.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestControlSocketChecks: `sandcell run` sends nothing to a control
// socket that another user could have planted or swapped - one owned by
// another user, writable by others, in an instance directory or a state
// dir others can write, a symlink (the socket's or its directory's), not
// a socket - and runs standalone instead (runOnServer nil, and the
// listener behind it never sees a connection). A good one passes.
func TestControlSocketChecks(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name string
		// spoil changes a state dir whose server's socket is good; it
		// returns the state dir the client is given and the owners to
		// check against (nil: controlOwners()).
		spoil func(t *testing.T, state, sock string) (stateDir string, owners []int)
		ok    bool
	}{
		{name: "good", ok: true, spoil: func(t *testing.T, state, sock string) (string, []int) { return state, nil }},
		{name: "wrong owner", spoil: func(t *testing.T, state, sock string) (string, []int) {
			if os.Geteuid() == 0 {
				if err := os.Lchown(sock, 4242, 4242); err != nil {
					t.Fatal(err)
				}
				return state, nil
			}
			return state, []int{os.Geteuid() + 1} // not root: the owners are the parameter
		}},
		{name: "world-writable socket", spoil: func(t *testing.T, state, sock string) (string, []int) {
			chmod(t, sock, 0o666)
			return state, nil
		}},
		{name: "writable instance directory", spoil: func(t *testing.T, state, sock string) (string, []int) {
			chmod(t, filepath.Dir(sock), 0o777)
			return state, nil
		}},
		{name: "writable state dir", spoil: func(t *testing.T, state, sock string) (string, []int) {
			chmod(t, state, 0o777)
			return state, nil
		}},
		{name: "symlink", spoil: func(t *testing.T, state, sock string) (string, []int) {
			other := socketDir(t)
			mkdir(t, filepath.Join(other, "inst"))
			if err := os.Symlink(sock, filepath.Join(other, "inst", controlSocketName)); err != nil {
				t.Fatal(err)
			}
			return other, nil
		}},
		{name: "symlinked instance directory", spoil: func(t *testing.T, state, sock string) (string, []int) {
			other := socketDir(t)
			if err := os.Symlink(filepath.Dir(sock), filepath.Join(other, "inst")); err != nil {
				t.Fatal(err)
			}
			return other, nil
		}},
		{name: "not a socket", spoil: func(t *testing.T, state, sock string) (string, []int) {
			other := socketDir(t)
			mkdir(t, filepath.Join(other, "inst"))
			if err := os.WriteFile(filepath.Join(other, "inst", controlSocketName), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return other, nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := socketDir(t)
			sock, accepted := fakeServer(t, state)
			stateDir, owners := tt.spoil(t, state, sock)
			if owners != nil { // not root: the owner's check with another user's uid
				if err := checkControlSocket(sock, owners); err == nil || !strings.Contains(err.Error(), "control socket refused") {
					t.Errorf("checkControlSocket with other owners: %v, want a refusal", err)
				}
				return
			}
			c, _, err := findControl(stateDir)
			if c != nil {
				c.Close()
			}
			if tt.ok != (err == nil) {
				t.Fatalf("findControl: %v, want ok %v", err, tt.ok)
			}
			if tt.ok {
				return
			}
			if !strings.Contains(err.Error(), "control socket refused") {
				t.Errorf("findControl: %v, want a refusal", err)
			}
			if r := runOnServer(context.Background(), log, stateDir, "/home", controlRun{Language: "sh", Source: []byte("true")}); r != nil {
				t.Errorf("runOnServer through a refused socket: %+v, want nil (standalone)", r)
			}
			time.Sleep(50 * time.Millisecond)
			if n := accepted.Load(); n != 0 {
				t.Errorf("the refused socket's listener got %d connections, want none", n)
			}
		})
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// stateWithInstance is a state dir (0711) with an instance directory
// (0711) in it, as a server makes them.
func stateWithInstance(t *testing.T) (state, inst string) {
	t.Helper()
	state = socketDir(t)
	chmod(t, state, 0o711)
	inst = filepath.Join(state, "inst")
	mkdir(t, inst)
	return state, inst
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o711); err != nil {
		t.Fatal(err)
	}
}

// TestControlSocketPerInstance: each server has its own socket, in its
// instance's directory, removed by Close; a client finds the servers of
// its own state dir only, and none in a state dir without one.
func TestControlSocketPerInstance(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	stateA, stateB := socketDir(t), socketDir(t)
	mkdir(t, filepath.Join(stateA, "a"))
	mkdir(t, filepath.Join(stateB, "b"))
	mkdir(t, filepath.Join(stateB, "not-a-server"))
	a, err := listenControl(filepath.Join(stateA, "a"), log)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(filepath.Join(stateA, "a", controlSocketName))
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v %v, want a socket of mode 0600", st, err)
	}
	b, err := listenControl(filepath.Join(stateB, "b"), log)
	if err != nil {
		t.Fatal(err)
	}
	for state, want := range map[string]string{stateA: a.path, stateB: b.path} {
		c, path, err := findControl(state)
		if err != nil || path != want {
			t.Errorf("findControl(%s): %s %v, want %s", state, path, err, want)
		}
		if c != nil {
			c.Close()
		}
	}
	a.Close()
	if _, err := os.Lstat(a.path); !os.IsNotExist(err) {
		t.Errorf("the socket after Close: %v, want it gone", err)
	}
	if c, _, err := findControl(stateA); c != nil || err == nil || strings.Contains(err.Error(), "refused") {
		t.Errorf("findControl with its server closed: %v, want no server (not a refusal)", err)
	}
	b.Close()
}

// TestRunServerAllowed: a run uses a local server only when nothing asks
// for standalone (SANDCELL_NO_SERVER=1) and no global setting the server
// would not honour is given, on the command line or in a config file.
func TestRunServerAllowed(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(conf, []byte("max-runs = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "local.toml")
	if err := os.WriteFile(local, []byte("log-level = \"error\"\nhttp = \"127.0.0.1:1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		env  string
		want bool
	}{
		{[]string{"run", "--lang", "sh", "--code", "true"}, "", true},
		{[]string{"--state-dir", "/run/x", "--home", "/var/lib/x", "--isolation", "gvisor", "--log-level", "debug", "run", "--code", "true"}, "", true},
		{[]string{"--config", local, "run", "--code", "true"}, "", true},
		{[]string{"run", "--code", "true"}, "1", false},
		{[]string{"--max-memory", "1GiB", "run", "--code", "true"}, "", false},
		{[]string{"--no-build", "run", "--code", "true"}, "", false},
		{[]string{"--cgroup-parent", "/x", "run", "--code", "true"}, "", false},
		{[]string{"--config", conf, "run", "--code", "true"}, "", false},
	}
	for _, tt := range tests {
		t.Setenv(noServerEnv, tt.env)
		cl, code := parse(tt.args, strings.NewReader(""), io.Discard, io.Discard)
		if cl == nil {
			t.Fatalf("parse %q: exit %d", tt.args, code)
		}
		if got := cl.env.serverAllowed(); got != tt.want {
			t.Errorf("%s=%s %q: serverAllowed %v, want %v", noServerEnv, tt.env, tt.args, got, tt.want)
		}
	}
}

// serveControl serves handle on a control socket of its own and returns
// its state dir.
func serveControl(t *testing.T, handle func(context.Context, controlRequest) controlReply) string {
	t.Helper()
	dir, inst := stateWithInstance(t)
	srv, err := listenControl(inst, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.serve(ctx, handle); close(done) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return dir
}

// TestControlProtocol: a run goes to the server and its reply comes
// back whole (the result, the limit notes api.Result does not
// serialize, a refusal's text); a reply asking for a standalone run, a
// server that closes without a reply, and a request of another protocol
// version make the client run it itself; ^C (the client's context)
// cancels the run on the server, whose result still comes back.
func TestControlProtocol(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	run := controlRun{Language: "sh", Source: []byte("echo hi"), Stdin: []byte{0, 0xfe}, Env: []string{"K=V"}, Limits: api.Limits{TimeoutMS: 1500}}
	var got controlRequest
	dir := serveControl(t, func(ctx context.Context, req controlRequest) controlReply {
		got = req
		switch string(req.Run.Source) {
		case "refuse":
			return controlReply{Error: "unknown language \"x\""}
		case "standalone":
			return controlReply{Fallback: "busy"}
		case "wait":
			select {
			case <-ctx.Done(): // the client's ^C
				return controlReply{Result: &api.Result{Phase: api.Phase{Status: api.StatusCancelled, ExitCode: 137, Message: "cancelled"}}}
			case <-time.After(5 * time.Second):
				return controlReply{Result: &api.Result{Phase: api.Phase{Status: api.StatusOK}}}
			}
		}
		return controlReply{Result: &api.Result{Phase: api.Phase{Stdout: "hi\n", Status: api.StatusOK}}, Notes: []string{"timeout clamped"}}
	})
	r := runOnServer(context.Background(), log, dir, "/home", run)
	if r == nil || r.Result.Stdout != "hi\n" || len(r.Notes) != 1 || r.Notes[0] != "timeout clamped" {
		t.Fatalf("runOnServer: %+v, want the result and its note", r)
	}
	if got.Version != controlVersion || got.Home != "/home" || string(got.Run.Stdin) != string(run.Stdin) || got.Run.Env[0] != "K=V" || got.Run.Limits.TimeoutMS != 1500 {
		t.Errorf("the server got %+v, want %+v", got, run)
	}
	// Empty input is not no input: an empty pipe against /dev/null.
	for _, stdin := range [][]byte{nil, {}} {
		run.Stdin = stdin
		runOnServer(context.Background(), log, dir, "/home", run)
		if (got.Run.Stdin == nil) != (stdin == nil) || len(got.Run.Stdin) != 0 {
			t.Errorf("stdin %#v arrived as %#v", stdin, got.Run.Stdin)
		}
	}
	run.Source = []byte("refuse")
	if r := runOnServer(context.Background(), log, dir, "/home", run); r == nil || r.Error != `unknown language "x"` {
		t.Errorf("a refusal: %+v", r)
	}
	run.Source = []byte("standalone")
	if r := runOnServer(context.Background(), log, dir, "/home", run); r != nil {
		t.Errorf("a reply asking for a standalone run: %+v, want nil", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	run.Source = []byte("wait")
	if r := runOnServer(ctx, log, dir, "/home", run); r == nil || r.Result.Status != api.StatusCancelled {
		t.Errorf("a run cancelled by the client: %+v, want its cancelled result", r)
	}

	// Another protocol version: the server asks for a standalone run.
	c, _, err := findControl(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	json.NewEncoder(c).Encode(controlRequest{Version: controlVersion + 1, Home: "/home", Run: run})
	var reply controlReply
	if err := json.NewDecoder(c).Decode(&reply); err != nil || reply.Fallback == "" || reply.Result != nil {
		t.Errorf("a request of another version: %+v %v, want a fallback", reply, err)
	}

	// A server that closes without a reply.
	mute := socketDir(t)
	fakeServer(t, mute)
	if r := runOnServer(context.Background(), log, mute, "/home", run); r != nil {
		t.Errorf("a server that closed without a reply: %+v, want nil (standalone)", r)
	}
}

// TestControlHandler: the server runs a request through its gate and
// answers its result and notes, or a refusal's text; it sends back, to
// run standalone, a request for another home, one that comes during a
// drain, and one its gate refuses as busy.
func TestControlHandler(t *testing.T) {
	var drain health.Drainer
	admit := func(context.Context) (func(), error) { return func() {}, nil }
	var err error
	var admitted bool
	execute := func(ctx context.Context, req executor.Request) (api.Result, error) {
		admitted = req.Admit != nil
		return api.Result{Phase: api.Phase{Stdout: string(req.Source)}, Notes: []string{"clamped"}}, err
	}
	h := controlHandler("/var/lib/sandcell/", execute, admit, &drain)
	req := controlRequest{Version: controlVersion, Home: "/var/lib/sandcell", Run: controlRun{Language: "sh", Source: []byte("out")}}
	if r := h(context.Background(), req); r.Result == nil || r.Result.Stdout != "out" || len(r.Notes) != 1 || !admitted {
		t.Errorf("a run: %+v (admitted through the gate: %v)", r, admitted)
	}
	err = fmt.Errorf("%w: unknown language", api.ErrInvalid)
	if r := h(context.Background(), req); r.Error != err.Error() || r.Result != nil {
		t.Errorf("a refusal: %+v", r)
	}
	err = fmt.Errorf("%w: 4 runs waiting", api.ErrBusy)
	if r := h(context.Background(), req); r.Fallback == "" || r.Result != nil {
		t.Errorf("busy: %+v, want a fallback", r)
	}
	err = nil
	other := req
	other.Home = "/srv/other"
	if r := h(context.Background(), other); r.Fallback == "" {
		t.Errorf("another home: %+v, want a fallback", r)
	}
	go drain.Drain(context.Background())
	for !drain.Draining() {
		time.Sleep(time.Millisecond)
	}
	if r := h(context.Background(), req); r.Fallback == "" {
		t.Errorf("during a drain: %+v, want a fallback", r)
	}
}
