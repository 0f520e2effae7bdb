package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
)

// TestRunOnServerSameAsStandalone: with a server up (serve --tcp, its
// control socket in its state dir), `sandcell run` runs there, and what
// it prints and exits with is the same as a standalone run's
// (--standalone; SANDCELL_NO_SERVER=1): stdout, stderr, the exit status
// and every field of --json but the measured ones, for a program that
// writes both streams and fails, its --json, stdin (empty, none), --env, a timeout, a
// limit clamped to the ceilings (its warning), a refusal (an unknown
// language). Once the server is gone, so is its socket: run goes
// standalone.
func TestRunOnServerSameAsStandalone(t *testing.T) {
	requireLayers(t, "sh")
	state := testState(t)
	home := layerHome()
	ctx, stop := context.WithCancel(context.Background())
	exited, serverErr := startServe(ctx, state, "--tcp", "127.0.0.1:0")
	code, waited := -1, false
	waitServe := func() {
		if !waited {
			waited = true
			select {
			case code = <-exited:
			case <-time.After(30 * time.Second):
				t.Errorf("serve did not exit\n%s", serverErr.String())
			}
		}
	}
	defer func() { stop(); waitServe() }()
	var sock string
	waitFor(t, 30*time.Second, "the control socket", func() bool {
		socks, _ := filepath.Glob(filepath.Join(state, "*", controlSocketName))
		if len(socks) == 1 {
			sock = socks[0]
		}
		return sock != ""
	})

	// cliIn runs the CLI in-process against the server's state dir; a
	// standalone run also gets the test's cgroup parent.
	cliIn := func(standalone bool, stdin string, args ...string) (int, string, string) {
		global := []string{"--state-dir", state, "--layer-dir", home}
		if standalone {
			global = append(global, "--cgroup-parent", "/"+filepath.Base(state))
			args = append([]string{args[0], "--standalone"}, args[1:]...)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), append(global, args...), strings.NewReader(stdin), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, errOut := cliIn(false, "", "--log-level", "debug", "run", "--lang", "sh", "--code", "true"); code != 0 || !strings.Contains(errOut, "ran on the local server") {
		t.Fatalf("run with a server up: exit %d, stderr %q; want it run on the local server", code, errOut)
	}

	logTime := regexp.MustCompile(`time=\S+ `)
	cases := []struct {
		name  string
		stdin string
		args  []string
	}{
		{"streams and exit status", "", []string{"run", "--lang", "sh", "--code", "echo out; echo err >&2; exit 7"}},
		{"json", "", []string{"run", "--lang", "sh", "--json", "--code", "echo out; echo err >&2; exit 7"}},
		{"stdin and env", "hello\n", []string{"run", "--lang", "sh", "--stdin", "-", "--env", "K=V", "--code", `read x; echo "$x $K"`}},
		{"empty stdin", "", []string{"run", "--lang", "sh", "--stdin", "-", "--code", `[ -p /dev/stdin ] && echo pipe || echo other`}},
		{"no stdin", "", []string{"run", "--lang", "sh", "--code", `[ -p /dev/stdin ] && echo pipe || echo other`}},
		{"timeout", "", []string{"run", "--lang", "sh", "--timeout", "500ms", "--code", "echo before; sleep 5"}},
		{"timeout json", "", []string{"run", "--lang", "sh", "--json", "--timeout", "500ms", "--code", "sleep 5"}},
		{"clamped", "", []string{"run", "--lang", "sh", "--timeout", "100h", "--code", "echo clamped"}},
		{"refused", "", []string{"run", "--lang", "no-such-language", "--code", "true"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, sout, serr := cliIn(false, c.stdin, c.args...)
			ac, aout, aerr := cliIn(true, c.stdin, c.args...)
			if sc != ac {
				t.Errorf("exit status: %d through the server, %d standalone", sc, ac)
			}
			if serr, aerr = logTime.ReplaceAllString(serr, ""), logTime.ReplaceAllString(aerr, ""); serr != aerr {
				t.Errorf("stderr:\n%q through the server\n%q standalone", serr, aerr)
			}
			if !slices.Contains(c.args, "--json") {
				if sout != aout {
					t.Errorf("stdout:\n%q through the server\n%q standalone", sout, aout)
				}
				return
			}
			var sres, ares map[string]any
			if err := json.Unmarshal([]byte(sout), &sres); err != nil {
				t.Fatalf("--json through the server: %v\n%s", err, sout)
			}
			if err := json.Unmarshal([]byte(aout), &ares); err != nil {
				t.Fatalf("--json standalone: %v\n%s", err, aout)
			}
			for _, measured := range []string{"execution_time_ms", "cpu_time_ms", "memory_peak_bytes"} {
				for _, r := range []map[string]any{sres, ares} {
					if _, ok := r[measured]; !ok {
						t.Errorf("--json has no %s", measured)
					}
					delete(r, measured)
				}
			}
			for k, av := range ares {
				if sv, _ := json.Marshal(sres[k]); string(sv) != mustJSON(av) {
					t.Errorf("--json %s: %s through the server, %s standalone", k, sv, mustJSON(av))
				}
			}
			for k := range sres {
				if _, ok := ares[k]; !ok {
					t.Errorf("--json %s through the server only", k)
				}
			}
		})
	}

	// The server gone (its socket with it), run makes its own instance.
	stop()
	if waitServe(); code != 0 {
		t.Errorf("serve exited %d\n%s", code, serverErr.String())
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the control socket after serve exited: %v, want it removed", err)
	}
	if r := runOnServer(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), state, home, controlRun{Language: "sh", Source: []byte("true")}); r != nil {
		t.Errorf("runOnServer with the server gone: %+v, want nil (standalone)", r)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestControlServerChecksPeer: the server answers only its own user,
// whatever the socket's mode lets connect (the moment between bind and
// chmod, an operator's chmod): a request from uid 65534 on a socket
// opened to everyone gets no reply and runs nothing, while root's, the
// same bytes by the same client, is answered.
func TestControlServerChecksPeer(t *testing.T) {
	testutil.RequireRoot(t)
	_, inst := stateWithInstance(t)
	var calls atomic.Int32
	srv, err := listenControl(inst, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		srv.serve(ctx, func(context.Context, controlRequest) controlReply {
			calls.Add(1)
			return controlReply{Result: &api.Result{Phase: api.Phase{Stdout: "ran"}}}
		})
		close(done)
	}()
	defer func() { cancel(); <-done; srv.Close() }()
	chmod(t, srv.path, 0o666)
	// The server may close before the request is sent: a broken pipe
	// or a reset is no reply.
	client := `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
out = b''
try:
    s.sendall(b'{"version":1,"home":"/h","run":{"language":"sh","limits":{}}}\n')
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
except (BrokenPipeError, ConnectionResetError):
    pass
sys.stdout.write(out.decode())
`
	ask := func(uid uint32) string {
		cmd := exec.Command("/usr/bin/python3", "-c", client, srv.path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the client as uid %d: %v\n%s", uid, err, out)
		}
		return string(out)
	}
	if out := ask(65534); out != "" || calls.Load() != 0 {
		t.Errorf("uid 65534: reply %q and %d runs, want none", out, calls.Load())
	}
	if out := ask(0); !strings.Contains(out, `"stdout":"ran"`) || calls.Load() != 1 {
		t.Errorf("root: reply %q and %d runs, want the result of one", out, calls.Load())
	}
}

// TestControlClientChecksPeer: a socket that passes every path check
// (root's, 0600, in root's directories) but is served by another user's
// process (bound by uid 65534, then swapped under root's name) gets
// nothing from the client: SO_PEERCRED refuses it before a byte is sent.
func TestControlClientChecksPeer(t *testing.T) {
	testutil.RequireRoot(t)
	state, inst := stateWithInstance(t)
	chmod(t, inst, 0o777) // for the other user's bind only
	sock := filepath.Join(inst, controlSocketName)
	server := `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
print("ready", flush=True)
s.settimeout(5)
try:
    c, _ = s.accept()
    c.settimeout(1)
    got = b''
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            got += b
    except socket.timeout:
        pass
    print("received", len(got), flush=True)
except socket.timeout:
    print("no connection", flush=True)
`
	cmd := exec.Command("/usr/bin/python3", "-c", server, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("the other user's server: %q %v", line, err)
	}
	// The path made root's: only the peer's uid tells.
	chmod(t, inst, 0o711)
	if err := os.Lchown(sock, 0, 0); err != nil {
		t.Fatal(err)
	}
	chmod(t, sock, 0o600)
	if err := checkControlSocket(sock, []int{0}); err != nil {
		t.Fatalf("the swapped socket fails a path check (the test needs it to pass them): %v", err)
	}
	c, _, err := findControl(state)
	if c != nil {
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "peer is uid 65534") {
		t.Errorf("findControl: %v, want the peer refused", err)
	}
	if line, _ := out.ReadString('\n'); line != "received 0\n" {
		t.Errorf("the other user's server: %q, want a connection and 0 bytes", line)
	}
	cmd.Wait()
}
