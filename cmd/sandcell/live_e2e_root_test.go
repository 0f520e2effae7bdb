package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/health"
	"github.com/sandcell/sandcell/internal/testutil"
)

// liveServer is a `sandcell serve --http` child process whose live
// sandboxes a test drives through the HTTP API, as a user does.
type liveServer struct {
	t        *testing.T
	h        *instanceHost
	state    string
	home     string // its --sessions-dir's parent: sessions/ and sandboxes/
	addr     string
	base     string
	pid      int // the server's
	kill     func()
	stderr   *bytes.Buffer
	args     []string
	serveCmd func() // starts it again on the same state and files
}

func startLiveServer(t *testing.T) *liveServer {
	t.Helper()
	requireLayers(t, "python")
	s := &liveServer{t: t, h: newInstanceHost(t), state: testState(t), home: t.TempDir()}
	s.serveCmd = func() {
		s.addr = "127.0.0.1:" + freePort(t)
		s.base = "http://" + s.addr
		cmd, _, stderr := s.h.start(append(s.h.global(s.state, s.h.parent), "--sessions-dir", filepath.Join(s.home, "sessions"),
			"serve", "--http", s.addr, "--tools", "live")...)
		s.pid, s.stderr = cmd.Process.Pid, stderr
		s.kill = func() {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
		}
		waitFor(t, 30*time.Second, "/healthz", func() bool {
			resp, err := http.Get(s.base + health.LivePath)
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == 200
		})
	}
	s.serveCmd()
	return s
}

// do sends a JSON request to the API (path below /v1/sandboxes) and
// returns the status and body.
func (s *liveServer) do(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.base+"/v1/sandboxes"+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// must is do that wants status want and decodes the answer into out.
func (s *liveServer) must(want int, method, path string, body, out any) {
	s.t.Helper()
	code, b := s.do(method, path, body)
	if code != want {
		s.t.Fatalf("%s %s: %d %s, want %d\nserver's stderr:\n%s", method, path, code, b, want, s.stderr.String())
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// nothingLeft waits until no cgroup is left under the server's parent
// and no process in the sandbox uid range, but the warm pool's: the
// sandboxes it prepared ahead ("<instance>-pool-N") belong to the running
// server, not to a sandbox that ended (TestLivePoolClose and
// TestLiveSandboxKillNine show they go with the server).
func (s *liveServer) nothingLeft() {
	s.t.Helper()
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) && (len(s.cgroups()) > 0 || len(s.procs()) > 0) {
		time.Sleep(20 * time.Millisecond)
	}
	if c, p := s.cgroups(), s.procs(); len(c) > 0 || len(p) > 0 {
		s.t.Errorf("10 s after the last sandbox's end: cgroups %v, processes %v", c, p)
	}
}

// cgroups lists the cgroups under the server's parent but the warm pool's.
func (s *liveServer) cgroups() []string {
	var l []string
	for _, c := range runCgroups(s.h.parent) {
		if !strings.Contains(c, "-pool-") {
			l = append(l, c)
		}
	}
	return l
}

// procs lists the processes in the sandbox uid range that are in a
// cgroup below this server's parent (other helpers' sandboxes on the
// host are not), but the warm pool's.
func (s *liveServer) procs() []string {
	var l []string
	for _, p := range sandboxProcs() {
		b, _ := os.ReadFile("/proc/" + strings.Fields(p)[0] + "/cgroup")
		if cg := string(b); strings.Contains(cg, s.h.parent+"/") && !strings.Contains(cg, "-pool-") {
			l = append(l, p)
		}
	}
	return l
}

func (s *liveServer) create(spec api.SandboxSpec) api.SandboxInfo {
	s.t.Helper()
	var info api.SandboxInfo
	s.must(http.StatusCreated, "POST", "", spec, &info)
	return info
}

// sh runs a shell line in sandbox id and waits for it.
func (s *liveServer) sh(id, line string) (stdout, stderr string, exit int) {
	s.t.Helper()
	var out struct {
		Stdout, Stderr string
		Exit           *api.ProcessExit
	}
	s.must(http.StatusOK, "POST", "/"+id+"/processes?wait=true", api.ProcessSpec{Shell: line}, &out)
	if out.Exit == nil {
		s.t.Fatalf("%q in %s: no exit in the answer", line, id)
	}
	return out.Stdout, out.Stderr, out.Exit.ExitCode
}

// port gets path of port 8000 of sandbox id through the proxy, by path
// or (host) by host name.
func (s *liveServer) port(id string, port int, path string, host bool) (int, string) {
	url := fmt.Sprintf("%s/v1/sandboxes/%s/ports/%d%s", s.base, id, port, path)
	req, _ := http.NewRequest("GET", url, nil)
	if host {
		req, _ = http.NewRequest("GET", s.base+path, nil)
		req.Host = fmt.Sprintf("%d-%s.localhost:%s", port, id, s.addr[strings.LastIndex(s.addr, ":")+1:])
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLiveSandboxJourney (issue #39), as a user drives it over HTTP: a
// background web server started in one call answers in later calls
// through the proxy, by path and by host name; paused, the sandbox keeps
// it and its files and a call resumes it; a second sandbox cannot see
// the first one's processes or files nor reach its port; delete leaves
// nothing of it.
func TestLiveSandboxJourney(t *testing.T) {
	s := startLiveServer(t)
	a := s.create(api.SandboxSpec{Template: "python", LifetimeMS: 600_000})
	if a.User != "user" || a.Home != "/home/user" {
		t.Errorf("sandbox info: user %q home %q, want user /home/user", a.User, a.Home)
	}
	req, _ := http.NewRequest("PUT", s.base+"/v1/sandboxes/"+a.ID+"/files?path=site/hello.txt", strings.NewReader("hello from A\n"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("write a file: %v %v", resp, err)
	}
	var web api.ProcessInfo
	s.must(http.StatusCreated, "POST", "/"+a.ID+"/processes",
		api.ProcessSpec{Shell: "python3 -m http.server 8000", Cwd: "/home/user/site", Tag: "web"}, &web)
	waitFor(t, 20*time.Second, "the web server through the proxy", func() bool {
		code, body := s.port(a.ID, 8000, "/hello.txt", false)
		return code == 200 && body == "hello from A\n"
	})
	if code, body := s.port(a.ID, 8000, "/hello.txt", true); code != 200 || body != "hello from A\n" {
		t.Errorf("by host name: %d %q", code, body)
	}
	if out, _, _ := s.sh(a.ID, "id -un; whoami; echo $HOME"); out != "user\nuser\n/home/user\n" {
		t.Errorf("id -un; whoami; echo $HOME: %q, want user, user, /home/user", out)
	}

	// Pause: the server does not answer (frozen), the state says so;
	// a call resumes it with its process and files.
	var info api.SandboxInfo
	s.must(http.StatusOK, "POST", "/"+a.ID+"/pause", nil, nil)
	s.must(http.StatusOK, "GET", "/"+a.ID, nil, &info)
	if info.State != "paused" {
		t.Errorf("after pause: state %q", info.State)
	}
	s.must(http.StatusOK, "POST", "/"+a.ID+"/resume", nil, nil)
	if code, body := s.port(a.ID, 8000, "/hello.txt", false); code != 200 || body != "hello from A\n" {
		t.Errorf("after resume: %d %q", code, body)
	}
	var procs []api.ProcessInfo
	s.must(http.StatusOK, "GET", "/"+a.ID+"/processes", nil, &procs)
	running := false
	for _, p := range procs {
		running = running || (p.PID == web.PID && p.Exit == nil)
	}
	if !running {
		t.Errorf("after pause and resume, the web server (pid %d) is not running: %+v", web.PID, procs)
	}
	// A pause, then a process call (no resume): it resumes.
	s.must(http.StatusOK, "POST", "/"+a.ID+"/pause", nil, nil)
	if out, _, code := s.sh(a.ID, "cat site/hello.txt"); code != 0 || out != "hello from A\n" {
		t.Errorf("a call to a paused sandbox: %d %q", code, out)
	}

	// B: its own processes, files and network.
	b := s.create(api.SandboxSpec{Template: "python", LifetimeMS: 600_000})
	out, _, _ := s.sh(b.ID, "ls /proc | grep -c '^[0-9]'; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '")
	if strings.Contains(out, "http.server") {
		t.Errorf("B sees A's process: %q", out)
	}
	if _, _, code := s.sh(b.ID, "test -e /home/user/site/hello.txt"); code == 0 {
		t.Error("B sees A's file")
	}
	prog := `import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", 8000)); print("reached")
except OSError as e:
    print("refused", e)`
	if out, _, _ := s.sh(b.ID, "python3 -c '"+prog+"'"); !strings.HasPrefix(out, "refused") {
		t.Errorf("B connects to port 8000: %q", out)
	}
	if out, _, _ := s.sh(b.ID, "ls /home/user; ls /sys/fs/cgroup 2>&1 | head -3"); strings.Contains(out, "site") {
		t.Errorf("B's home: %q", out)
	}
	if code, body := s.port(b.ID, 8000, "/hello.txt", false); code == 200 {
		t.Errorf("B's port 8000 answers with A's server: %d %q", code, body)
	}

	// Delete: 204, then 404; nothing of it remains.
	s.must(http.StatusNoContent, "DELETE", "/"+a.ID, nil, nil)
	s.must(http.StatusNotFound, "GET", "/"+a.ID, nil, nil)
	if code, _ := s.port(a.ID, 8000, "/hello.txt", false); code == 200 {
		t.Error("a deleted sandbox's port answers")
	}
	s.must(http.StatusNoContent, "DELETE", "/"+b.ID, nil, nil)
	s.nothingLeft()
}

// TestLiveSandboxPTY: an interactive shell on a terminal, as a user's
// terminal drives it: input in, the prompt and output out on the pty
// stream, a resize seen by the program (stty size), exit ends it.
func TestLiveSandboxPTY(t *testing.T) {
	s := startLiveServer(t)
	a := s.create(api.SandboxSpec{Template: "python", LifetimeMS: 600_000})
	var p api.ProcessInfo
	s.must(http.StatusCreated, "POST", "/"+a.ID+"/processes",
		api.ProcessSpec{Argv: []string{"python3", "-i", "-q"}, Stdin: true, PTY: &api.PTYSize{Cols: 80, Rows: 24}}, &p)
	resp, err := http.Get(fmt.Sprintf("%s/v1/sandboxes/%s/processes/%d/events", s.base, a.ID, p.PID))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var term strings.Builder
	lines := make(chan api.ProcessEvent, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev api.ProcessEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				lines <- ev
			}
		}
		close(lines)
	}()
	var end *api.ProcessExit
	expect := func(want string) {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for !strings.Contains(term.String(), want) {
			select {
			case ev, ok := <-lines:
				if !ok {
					t.Fatalf("the event stream ended before %q; terminal:\n%s", want, term.String())
				}
				if ev.Stream == api.StreamPTY {
					term.Write(ev.Data)
				}
				if ev.End != nil {
					end = ev.End
				}
			case <-deadline:
				t.Fatalf("no %q on the terminal; it shows:\n%s", want, term.String())
			}
		}
	}
	input := func(text string) {
		t.Helper()
		s.must(http.StatusNoContent, "POST", fmt.Sprintf("/%s/processes/%d/input", a.ID, p.PID), map[string]string{"text": text}, nil)
	}
	expect(">>> ")
	input("import os, sys; print(sys.stdin.isatty(), os.get_terminal_size())\n")
	expect("True os.terminal_size(columns=80, lines=24)")
	s.must(http.StatusNoContent, "POST", fmt.Sprintf("/%s/processes/%d/resize", a.ID, p.PID), api.PTYSize{Cols: 132, Rows: 40}, nil)
	input("print(os.get_terminal_size())\n")
	expect("os.terminal_size(columns=132, lines=40)")
	input("print(6*7)\n")
	expect("42")
	input("raise SystemExit(3)\n")
	var exit api.ProcessExit
	s.must(http.StatusOK, "GET", fmt.Sprintf("/%s/processes/%d/wait", a.ID, p.PID), nil, &exit)
	if exit.ExitCode != 3 {
		t.Errorf("the REPL's exit: %+v, want 3", exit)
	}
	_ = end
	s.must(http.StatusNoContent, "DELETE", "/"+a.ID, nil, nil)
}

// TestLiveSandboxLifetime: at its lifetime's end a sandbox is paused or
// killed, as its creator asked.
func TestLiveSandboxLifetime(t *testing.T) {
	s := startLiveServer(t)
	p := s.create(api.SandboxSpec{Template: "python", LifetimeMS: 1500, OnExpire: api.OnExpirePause})
	k := s.create(api.SandboxSpec{Template: "python", LifetimeMS: 1500, OnExpire: api.OnExpireKill})
	s.sh(p.ID, "echo kept > kept.txt")
	var info api.SandboxInfo
	waitFor(t, 15*time.Second, "the pause at the lifetime's end", func() bool {
		s.must(http.StatusOK, "GET", "/"+p.ID, nil, &info)
		return info.State == "paused"
	})
	waitFor(t, 15*time.Second, "the kill at the lifetime's end", func() bool {
		code, _ := s.do("GET", "/"+k.ID, nil)
		return code == http.StatusNotFound
	})
	if out, _, _ := s.sh(p.ID, "cat kept.txt"); out != "kept\n" {
		t.Errorf("the paused sandbox, resumed by a call: %q", out)
	}
	s.must(http.StatusNoContent, "DELETE", "/"+p.ID, nil, nil)
	s.nothingLeft()
}

// TestLiveSandboxKillNine: a `sandcell serve` killed with -9 while a live
// sandbox runs a background server leaves, within 5 s, no process in the
// sandbox uid range, no cgroup under its parent, no mount below its state
// dir and no loop device on the sandbox's disk; a new server re-creates
// the sandbox on its files (same id) and says its processes are gone.
func TestLiveSandboxKillNine(t *testing.T) {
	poolDir := filepath.Join(layerHome(), "sandboxes-pool")
	before := map[string]bool{}
	ents, _ := os.ReadDir(poolDir)
	for _, e := range ents {
		before[e.Name()] = true
	}
	// The warm pool's disks that this server made (another's left by a
	// kill of before are not its).
	newPoolDisks := func() []string {
		var l []string
		ents, _ := os.ReadDir(poolDir)
		for _, e := range ents {
			if !before[e.Name()] {
				l = append(l, e.Name())
			}
		}
		return l
	}
	s := startLiveServer(t)
	a := s.create(api.SandboxSpec{Template: "python", LifetimeMS: 600_000})
	// The pool prepares the kind just asked for: a disk to leave behind.
	for deadline := time.Now().Add(30 * time.Second); len(newPoolDisks()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the warm pool prepared no live sandbox in 30 s")
		}
	}
	s.sh(a.ID, "echo survived > note.txt")
	s.must(http.StatusCreated, "POST", "/"+a.ID+"/processes", api.ProcessSpec{Shell: "sleep 600"}, nil)
	if len(s.procs()) == 0 || len(runCgroups(s.h.parent)) == 0 {
		t.Fatalf("before the kill: processes %v, cgroups %v", s.procs(), runCgroups(s.h.parent))
	}
	sbDir := filepath.Join(s.home, "sandboxes")
	s.kill()
	killed := time.Now()
	left := func() []string {
		var l []string
		for _, p := range s.procs() {
			l = append(l, "process "+p)
		}
		for _, c := range runCgroups(s.h.parent) {
			l = append(l, "cgroup "+c)
		}
		for _, m := range testutil.MountsBelow(t, s.state) {
			l = append(l, "mount "+m)
		}
		for _, m := range testutil.MountsBelow(t, sbDir) {
			l = append(l, "mount "+m)
		}
		for _, d := range loopsOn(sbDir) {
			l = append(l, "loop "+d)
		}
		for _, d := range newPoolDisks() {
			l = append(l, "pool disk "+d)
		}
		return l
	}
	for time.Since(killed) < 5*time.Second && len(left()) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if l := left(); len(l) > 0 {
		t.Errorf("5 s after serve's SIGKILL: %s\nserve's stderr:\n%s", strings.Join(l, "; "), s.stderr.String())
	}
	s.serveCmd()
	var again api.SandboxInfo
	s.must(http.StatusCreated, "POST", "", api.SandboxSpec{Metadata: map[string]string{"sandbox_id": a.ID}}, &again)
	if again.ID != a.ID || !strings.Contains(strings.Join(again.Notes, "\n"), "its processes are gone") {
		t.Errorf("re-created: id %s (want %s), notes %q", again.ID, a.ID, again.Notes)
	}
	if out, _, _ := s.sh(a.ID, "cat note.txt; cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -q 'sleep [6]00' && echo sleeps || echo no sleep"); out != "survived\nno sleep\n" {
		t.Errorf("the re-created sandbox: %q, want its file and no process of before", out)
	}
	s.must(http.StatusNoContent, "DELETE", "/"+a.ID, nil, nil)
}

// loopsOn lists the loop devices whose backing file is below dir.
func loopsOn(dir string) []string {
	var l []string
	ents, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, e := range ents {
		raw, err := os.ReadFile(e)
		b := strings.TrimSpace(string(raw))
		if err == nil && strings.HasPrefix(b, dir+"/") {
			l = append(l, filepath.Base(filepath.Dir(filepath.Dir(e)))+" "+b)
		}
	}
	return l
}

// TestLiveSandboxMCP: the same journey through MCP's sandbox and process
// tools (serve --tools live), as a model drives it: a web server started
// with background in one call answers a foreground command of a later
// call, and the host reaches it at the tool's port_url through the proxy.
func TestLiveSandboxMCP(t *testing.T) {
	s := startLiveServer(t)
	sid := initialize(t, s.base)
	id := createOverMCP(t, s.base, sid, 2, "python")
	toolCall(t, s.base, sid, 3, "sandbox", map[string]any{"action": "write_file", "sandbox_id": id, "path": "www/index.html", "content": "mcp page"})
	toolCall(t, s.base, sid, 4, "process", map[string]any{"action": "start", "sandbox_id": id, "background": true,
		"command": "python3 -m http.server 8000", "cwd": "/home/user/www"})
	got := ""
	waitFor(t, 20*time.Second, "the server from a later call", func() bool {
		got = toolCall(t, s.base, sid, 5, "process", map[string]any{"action": "start", "sandbox_id": id,
			"command": `python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:8000/").read().decode())' 2>&1 || true`})
		return strings.Contains(got, "mcp page")
	})
	u := toolCall(t, s.base, sid, 6, "sandbox", map[string]any{"action": "port_url", "sandbox_id": id, "port": 8000})
	m := regexp.MustCompile(`"url":"(http://[^"]+)"`).FindStringSubmatch(u)
	if m == nil {
		t.Fatalf("port_url: %s", u)
	}
	// The URL's host is PORT-ID.localhost:PORT; send it to the listener.
	req, _ := http.NewRequest("GET", s.base+"/", nil)
	req.Host = strings.TrimSuffix(strings.TrimPrefix(m[1], "http://"), "/")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "mcp page" {
		t.Errorf("port_url %s through the proxy: %d %q", m[1], resp.StatusCode, body)
	}
	toolCall(t, s.base, sid, 7, "sandbox", map[string]any{"action": "kill", "sandbox_id": id})
	s.nothingLeft()
}

func apiSpecPython() api.SandboxSpec { return api.SandboxSpec{Template: "python", LifetimeMS: 600_000} }

// TestLiveSandboxFilesInTmp: the file API writes where the sandbox's own
// mounts are (its /tmp and /dev/shm: tmpfs of its user namespace) as it
// writes on its disk: every write into /tmp failed with EOVERFLOW, the
// kernel refusing an inode owned by the server's root there (E2B's git
// tests write their repositories in /tmp).
func TestLiveSandboxFilesInTmp(t *testing.T) {
	s := startLiveServer(t)
	a := s.create(api.SandboxSpec{Template: "python"})
	for _, p := range []string{"/tmp/new/dir/a.txt", "/dev/shm/b.txt", "/home/user/c.txt"} {
		req, _ := http.NewRequest("PUT", s.base+"/v1/sandboxes/"+a.ID+"/files?path="+p, strings.NewReader("in "+p+"\n"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("PUT %s: %d %s", p, resp.StatusCode, b)
		}
	}
	out, errOut, code := s.sh(a.ID, "cat /tmp/new/dir/a.txt /dev/shm/b.txt /home/user/c.txt; stat -c '%U %G' /tmp/new /tmp/new/dir/a.txt")
	if want := "in /tmp/new/dir/a.txt\nin /dev/shm/b.txt\nin /home/user/c.txt\nuser user\nuser user\n"; code != 0 || out != want {
		t.Errorf("in the sandbox: exit %d stdout %q stderr %q, want %q", code, out, errOut, want)
	}
}

// createOverMCP creates a live sandbox of template with the sandbox tool
// (call id rpc) and returns its id.
func createOverMCP(t *testing.T, base, sid string, rpc int, template string) string {
	t.Helper()
	created := toolCall(t, base, sid, rpc, "sandbox", map[string]any{"action": "create", "template": template, "timeout_s": 600})
	m := regexp.MustCompile(`"sandbox_id":"([^"]+)"`).FindStringSubmatch(created)
	if m == nil {
		t.Fatalf("create: %s", created)
	}
	return m[1]
}
