package e2b

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

func runArgs(cmd string) map[string]any {
	return map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}, "envs": map[string]string{"V": "val"}}, "stdin": false}
}

// Start streams start, data, end and the end-stream envelope, each framed
// (flag byte, big-endian length, JSON); the SDK's bash -l -c CMD becomes
// the spec's Shell, as user "user" by default and root by Basic auth.
func TestStartStreams(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	st, fs := e.serverStream(s, "process.Process/Start", runArgs("echo hello"), nil)
	evs, endErr := events(t, fs)
	if st != 200 || endErr != nil || !slices.Equal(evs, []string{"start", "stdout:hello\n", "end:0:exit status 0"}) {
		t.Fatalf("%d %v %v", st, evs, endErr)
	}
	if last := fs[len(fs)-1]; last.flags != flagEndStream || len(last.msg) != 0 {
		t.Errorf("end-stream envelope %+v, want flag 2 and {}", last)
	}
	p := must(e.sb.FindProcess(t.Context(), s.SandboxID, 101, ""))
	if p.Spec.Shell != "echo hello" || p.Spec.Argv != nil || p.Spec.User != "" || p.Spec.Env["V"] != "val" || p.Spec.Stdin {
		t.Errorf("spec %+v", p.Spec)
	}
	_, fs = e.serverStream(s, "process.Process/Start", runArgs("whoami"), map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))})
	if evs, _ := events(t, fs); !slices.Contains(evs, "stdout:root\n") {
		t.Errorf("as root: %v", evs)
	}
	// stderr, an exit code, a command not found.
	_, fs = e.serverStream(s, "process.Process/Start", runArgs("nosuch"), nil)
	if evs, _ := events(t, fs); !slices.Equal(evs, []string{"start", "stderr:bash: nosuch: command not found\n", "end:127:exit status 127"}) {
		t.Errorf("%v", evs)
	}
	// Another user is refused in the end-stream error.
	_, fs = e.serverStream(s, "process.Process/Start", runArgs("whoami"), map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("mallory:"))})
	if _, endErr := events(t, fs); endErr == nil || endErr["code"] != "unauthenticated" {
		t.Errorf("user mallory: %v", endErr)
	}
	// A wrong content type is refused with 415 (Connect's answer).
	resp, _ := e.do("POST", "/process.Process/Start", "{}", map[string]string{"E2b-Sandbox-Id": s.SandboxID, "X-Access-Token": s.EnvdAccessToken, "Content-Type": "application/proto"})
	if resp.StatusCode != 415 {
		t.Errorf("proto codec: %d", resp.StatusCode)
	}
}

// Connect-Timeout-Ms ends the process (E2B's timeoutMs) and the stream
// with deadline_exceeded.
func TestStartTimeout(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	_, fs := e.serverStream(s, "process.Process/Start", runArgs("sleep 100"), map[string]string{"Connect-Timeout-Ms": "300"})
	evs, endErr := events(t, fs)
	if len(evs) == 0 || evs[0] != "start" {
		t.Errorf("%v", evs)
	}
	if endErr == nil || endErr["code"] != "deadline_exceeded" || slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, "end:") }) {
		t.Errorf("after the timeout: %v %v, want no end event and deadline_exceeded (the SDK's TimeoutError)", evs, endErr)
	}
	p := must(e.sb.FindProcess(t.Context(), s.SandboxID, 101, ""))
	if p.Spec.TimeoutMS != 300 {
		t.Errorf("TimeoutMS %d", p.Spec.TimeoutMS)
	}
}

// A background command: List shows it, SendInput feeds it, Connect
// replays and follows it, CloseStdin ends cat, SendSignal kills a sleep,
// Update resizes a terminal; a tag selects as a pid does.
func TestProcessUnaries(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	start := func(req map[string]any) {
		resp := e.openStream(s, "process.Process/Start", req, map[string]string{"Connect-Timeout-Ms": "10000"})
		// Read the start event, leave the stream open (a background command).
		fl, msg, err := readEnvelope(resp.Body)
		if err != nil || fl != 0 || !strings.Contains(string(msg), `"start"`) {
			t.Fatalf("%d %s %v", fl, msg, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
	}
	cat := runArgs("cat")
	cat["stdin"] = true
	cat["tag"] = "mycat"
	start(cat)                   // pid 101
	start(runArgs("sleep 1000")) // pid 102
	start(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-i", "-l"}}, "pty": map[string]any{"size": map[string]any{"cols": 80, "rows": 24}}})

	var l struct {
		Processes []struct {
			Config processConfig `json:"config"`
			PID    int           `json:"pid"`
			Tag    string        `json:"tag"`
		} `json:"processes"`
	}
	if st, b := e.unary(s, "process.Process/List", map[string]any{}, &l); st != 200 || len(l.Processes) != 3 || l.Processes[0].Tag != "mycat" || l.Processes[1].Config.Args[2] != "sleep 1000" {
		t.Fatalf("List: %d %s", st, b)
	}
	in := base64.StdEncoding.EncodeToString([]byte("ping\n"))
	if st, b := e.unary(s, "process.Process/SendInput", map[string]any{"process": map[string]any{"tag": "mycat"}, "input": map[string]any{"stdin": in}}, nil); st != 200 {
		t.Fatalf("SendInput: %d %s", st, b)
	}
	if st, b := e.unary(s, "process.Process/CloseStdin", map[string]any{"process": map[string]any{"pid": 101}}, nil); st != 200 {
		t.Fatalf("CloseStdin: %d %s", st, b)
	}
	_, fs := e.serverStream(s, "process.Process/Connect", map[string]any{"process": map[string]any{"pid": 101}}, nil)
	if evs, _ := events(t, fs); !slices.Equal(evs, []string{"start", "stdout:ping\n", "end:0:exit status 0"}) {
		t.Errorf("Connect to cat: %v", evs)
	}
	if st, b := e.unary(s, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": 102}, "signal": "SIGNAL_SIGKILL"}, nil); st != 200 {
		t.Fatalf("SendSignal: %d %s", st, b)
	}
	exit := must(e.sb.Wait(t.Context(), s.SandboxID, 102))
	if exit.Signal != "SIGKILL" {
		t.Errorf("signal: %+v", exit)
	}
	// The SDK's kill of an ended process reads not_found as false.
	st, b := e.unary(s, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": 102}, "signal": 9}, nil)
	var re rpcError
	json.Unmarshal(b, &re)
	if st != 404 || re.Code != "not_found" {
		t.Errorf("SendSignal to an ended process: %d %s", st, b)
	}
	if st, b := e.unary(s, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": 103}, "signal": "SIGNAL_SIGHUP"}, nil); st != 400 {
		t.Errorf("an unknown signal: %d %s", st, b)
	}
	if st, b := e.unary(s, "process.Process/Update", map[string]any{"process": map[string]any{"pid": 103}, "pty": map[string]any{"size": map[string]any{"cols": 120, "rows": 40}}}, nil); st != 200 {
		t.Errorf("Update: %d %s", st, b)
	}
	if p := must(e.sb.proc(s.SandboxID, 103)); p.size.Cols != 120 || p.size.Rows != 40 {
		t.Errorf("size %+v", p.size)
	}
	if st, _ := e.unary(s, "process.Process/Nope", map[string]any{}, nil); st != 501 {
		t.Errorf("an unknown method: %d, want 501 (unimplemented)", st)
	}
}

// StreamInput, the client stream: start, then data envelopes in one
// request body; HTTP/1.1 carries it.
func TestStreamInput(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	cat := runArgs("cat")
	cat["stdin"] = true
	resp := e.openStream(s, "process.Process/Start", cat, nil)
	readEnvelope(resp.Body)
	defer resp.Body.Close()
	var body bytes.Buffer
	for _, m := range []string{`{"start":{"process":{"pid":101}}}`, `{"data":{"input":{"stdin":"` + base64.StdEncoding.EncodeToString([]byte("a")) + `"}}}`, `{"keepalive":{}}`, `{"data":{"input":{"stdin":"` + base64.StdEncoding.EncodeToString([]byte("b")) + `"}}}`} {
		body.Write(envelope(0, []byte(m)))
	}
	h := envdHdr(s)
	h["Content-Type"] = "application/connect+json"
	r, b := e.do("POST", "/process.Process/StreamInput", body.Bytes(), h)
	if r.StatusCode != 200 || !bytes.HasSuffix(b, envelope(flagEndStream, []byte("{}"))) {
		t.Fatalf("StreamInput: %d %q", r.StatusCode, b)
	}
	e.sb.CloseStdin(t.Context(), s.SandboxID, 101)
	var out []string
	for {
		_, msg, err := readEnvelope(resp.Body)
		if err != nil {
			break
		}
		out = append(out, string(msg))
	}
	if j := strings.Join(out, ""); !strings.Contains(j, base64.StdEncoding.EncodeToString([]byte("a"))) || !strings.Contains(j, base64.StdEncoding.EncodeToString([]byte("b"))) {
		t.Errorf("cat saw %v", out)
	}
}

// Envelope framing is checked: a truncated or oversized request envelope
// is an end-stream invalid_argument, not a hang or a crash.
func TestEnvelopeErrors(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	h := envdHdr(s)
	h["Content-Type"] = "application/connect+json"
	big := make([]byte, 5)
	binary.BigEndian.PutUint32(big[1:], maxMessage+1)
	for name, body := range map[string][]byte{"truncated": {0, 0, 0, 0, 9, '{'}, "oversized": big, "short header": {0, 0}, "compressed": envelope(flagCompress, []byte("{}")), "not json": envelope(0, []byte("nope"))} {
		resp, b := e.do("POST", "/process.Process/Start", body, h)
		fl, msg, err := readEnvelope(bytes.NewReader(b))
		if resp.StatusCode != 200 || err != nil || fl != flagEndStream || !strings.Contains(string(msg), "invalid_argument") {
			t.Errorf("%s: %d %q", name, resp.StatusCode, b)
		}
	}
}

func TestFilesystemRPCs(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	var ent struct{ Entry entryInfo }
	if st, b := e.unary(s, "filesystem.Filesystem/MakeDir", map[string]any{"path": "d/e"}, &ent); st != 200 || ent.Entry.Type != "FILE_TYPE_DIRECTORY" || ent.Entry.Path != "/home/user/d/e" || ent.Entry.Permissions != "drwxr-xr-x" {
		t.Fatalf("MakeDir: %d %s", st, b)
	}
	st, b := e.unary(s, "filesystem.Filesystem/MakeDir", map[string]any{"path": "d/e"}, nil)
	if st != 409 || !strings.Contains(string(b), "already_exists") {
		t.Errorf("MakeDir again: %d %s", st, b)
	}
	must(e.sb.WriteFile(t.Context(), s.SandboxID, "d/f.txt", []byte("12345"), ""))
	if st, b := e.unary(s, "filesystem.Filesystem/Stat", map[string]any{"path": "/home/user/d/f.txt"}, &ent); st != 200 || ent.Entry.Size != "5" || ent.Entry.Type != "FILE_TYPE_FILE" || ent.Entry.ModifiedTime == "" {
		t.Errorf("Stat: %d %s", st, b)
	}
	var raw map[string]map[string]any
	e.unary(s, "filesystem.Filesystem/Stat", map[string]any{"path": "d/f.txt"}, &raw)
	if _, ok := raw["entry"]["size"].(string); !ok {
		t.Errorf("size is not a string (ProtoJSON int64): %v", raw)
	}
	if st, b := e.unary(s, "filesystem.Filesystem/Stat", map[string]any{"path": "nope"}, nil); st != 404 || !strings.Contains(string(b), "not_found") {
		t.Errorf("Stat missing: %d %s", st, b)
	}
	var l struct{ Entries []entryInfo }
	if st, b := e.unary(s, "filesystem.Filesystem/ListDir", map[string]any{"path": "d"}, &l); st != 200 || len(l.Entries) != 2 {
		t.Errorf("ListDir: %d %s", st, b)
	}
	if st, b := e.unary(s, "filesystem.Filesystem/Move", map[string]any{"source": "d/f.txt", "destination": "d/g.txt"}, &ent); st != 200 || ent.Entry.Name != "g.txt" {
		t.Errorf("Move: %d %s", st, b)
	}
	if st, b := e.unary(s, "filesystem.Filesystem/Remove", map[string]any{"path": "d/g.txt"}, nil); st != 200 {
		t.Errorf("Remove: %d %s", st, b)
	}
	if _, err := e.sb.Stat(t.Context(), s.SandboxID, "d/g.txt"); err == nil {
		t.Error("Remove left the file")
	}
	if st, b := e.unary(s, "filesystem.Filesystem/Remove", map[string]any{"path": "d/g.txt"}, nil); st != 200 {
		t.Errorf("Remove of nothing (envd: done, as os.RemoveAll): %d %s", st, b)
	}
}

// /files: multipart with the part's filename as the full path (Go's
// Part.FileName would keep only the base), octet-stream with gzip, raw
// download, JSON errors.
func TestFiles(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	w1, _ := mw.CreateFormFile("file", "/home/user/a/one.txt")
	w1.Write([]byte("one"))
	w2, _ := mw.CreateFormFile("file", "two.txt")
	w2.Write([]byte("two"))
	mw.Close()
	h := envdHdr(s)
	h["Content-Type"] = mw.FormDataContentType()
	resp, b := e.do("POST", "/files", mp.Bytes(), h)
	var out []map[string]string
	json.Unmarshal(b, &out)
	if resp.StatusCode != 200 || len(out) != 2 || out[0]["path"] != "/home/user/a/one.txt" || out[0]["type"] != "file" || out[1]["name"] != "two.txt" {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	h = envdHdr(s)
	h["Content-Type"], h["Content-Encoding"] = "application/octet-stream", "gzip"
	if resp, b := e.do("POST", "/files?path=z.txt&username=root", gz.Bytes(), h); resp.StatusCode != 200 {
		t.Fatalf("octet-stream: %d %s", resp.StatusCode, b)
	}
	// root's relative path is in root's home, as envd resolves it.
	for p, want := range map[string]string{"a/one.txt": "one", "/home/user/two.txt": "two", "/root/z.txt": "zipped", "z.txt&username=root": "zipped"} {
		resp, b := e.do("GET", "/files?path="+p, nil, envdHdr(s))
		if resp.StatusCode != 200 || string(b) != want || resp.Header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("download %s: %d %q", p, resp.StatusCode, b)
		}
	}
	resp, b = e.do("GET", "/files?path=nope", nil, envdHdr(s))
	var ae apiError
	json.Unmarshal(b, &ae)
	if resp.StatusCode != 404 || ae.Code != 404 {
		t.Errorf("missing: %d %s", resp.StatusCode, b)
	}
	// The size bound holds.
	small := newEnv(t, func(o *Options) { o.MaxFileBytes = 4 })
	s = small.create("base")
	h = envdHdr(s)
	h["Content-Type"] = "application/octet-stream"
	if resp, b := small.do("POST", "/files?path=big", "12345", h); resp.StatusCode != 400 {
		t.Errorf("over the bound: %d %s", resp.StatusCode, b)
	}
}

// WatchDir polls and streams create, write and remove events, after a
// start event; the polled watchers of the Python sync SDK see the same,
// and a watcher id opens no other sandbox's watcher.
func TestWatch(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	e.sb.MakeDir(t.Context(), s.SandboxID, "w")
	resp := e.openStream(s, "filesystem.Filesystem/WatchDir", map[string]any{"path": "w"}, map[string]string{"Connect-Timeout-Ms": "5000"})
	defer resp.Body.Close()
	_, msg, _ := readEnvelope(resp.Body)
	if string(msg) != `{"start":{}}` {
		t.Fatalf("first message %q", msg)
	}
	var wr struct{ WatcherID string }
	if st, b := e.unary(s, "filesystem.Filesystem/CreateWatcher", map[string]any{"path": "w"}, &wr); st != 200 || wr.WatcherID == "" {
		t.Fatalf("CreateWatcher: %d %s", st, b)
	}
	e.sb.WriteFile(t.Context(), s.SandboxID, "w/x", []byte("1"), "")
	time.Sleep(3 * watchPoll)
	e.sb.WriteFile(t.Context(), s.SandboxID, "w/x", []byte("12"), "")
	time.Sleep(3 * watchPoll)
	e.sb.Remove(t.Context(), s.SandboxID, "w/x")
	var got []string
	for len(got) < 3 {
		fl, msg, err := readEnvelope(resp.Body)
		if err != nil || fl != 0 {
			t.Fatalf("after %v: %d %s %v", got, fl, msg, err)
		}
		var m struct{ Filesystem *fsEvent }
		json.Unmarshal(msg, &m)
		if m.Filesystem != nil {
			got = append(got, m.Filesystem.Type+" "+m.Filesystem.Name)
		}
	}
	if !slices.Equal(got, []string{"EVENT_TYPE_CREATE x", "EVENT_TYPE_WRITE x", "EVENT_TYPE_REMOVE x"}) {
		t.Errorf("WatchDir: %v", got)
	}
	var evs watcherEvents
	if st, b := e.unary(s, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": wr.WatcherID}, &evs); st != 200 || len(evs.Events) != 0 {
		// x came and went between the two polls of the watcher.
		t.Errorf("GetWatcherEvents: %d %s", st, b)
	}
	e.sb.WriteFile(t.Context(), s.SandboxID, "w/y", []byte("1"), "")
	if st, b := e.unary(s, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": wr.WatcherID}, &evs); st != 200 || len(evs.Events) != 1 || evs.Events[0] != (fsEvent{"y", "EVENT_TYPE_CREATE"}) {
		t.Errorf("GetWatcherEvents: %d %s", st, b)
	}
	other := e.create("base")
	if st, _ := e.unary(other, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": wr.WatcherID}, nil); st != 404 {
		t.Errorf("another sandbox read the watcher: %d", st)
	}
	// The proto field name works as ProtoJSON's lowerCamelCase does.
	if st, b := e.unary(s, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcher_id": wr.WatcherID}, &evs); st != 200 {
		t.Errorf("GetWatcherEvents by watcher_id: %d %s", st, b)
	}
	if st, _ := e.unary(s, "filesystem.Filesystem/RemoveWatcher", map[string]any{"watcherId": wr.WatcherID}, nil); st != 200 {
		t.Errorf("RemoveWatcher: %d", st)
	}
	if st, _ := e.unary(s, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": wr.WatcherID}, nil); st != 404 {
		t.Errorf("a removed watcher: %d", st)
	}
	// Watching a file or nothing is refused in the stream's end.
	_, fs := e.serverStream(s, "filesystem.Filesystem/WatchDir", map[string]any{"path": "nope"}, nil)
	if len(fs) != 1 || fs[0].flags != flagEndStream || fs[0].msg["error"] == nil {
		t.Errorf("watch of nothing: %+v", fs)
	}
}

// A sandbox's port: by E2b-Sandbox-Port with a token, by a PORT-ID host
// (getHost), refused without a token unless PublicPorts; the tokens never
// reach the server in the sandbox.
func TestPorts(t *testing.T) {
	seen := make(chan http.Header, 4)
	srv := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		io.WriteString(w, "dev server "+r.URL.Path)
	}))
	for _, public := range []bool{false, true} {
		e := newEnv(t, func(o *Options) { o.PublicPorts = public })
		s := e.create("base")
		e.sb.setPort(s.SandboxID, 3000, srv)
		resp, b := e.do("GET", "/x", nil, map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "3000", "X-Access-Token": s.EnvdAccessToken})
		if resp.StatusCode != 200 || string(b) != "dev server /x" {
			t.Fatalf("by header: %d %s", resp.StatusCode, b)
		}
		if h := <-seen; h.Get("X-Access-Token") != "" || h.Get("E2b-Sandbox-Id") != "" {
			t.Errorf("the token reached the sandbox's server: %v", h)
		}
		resp, b = e.do("GET", "/y", nil, map[string]string{"Host": "3000-" + s.SandboxID + ".e2b.app", "E2B-Traffic-Access-Token": s.TrafficAccessToken})
		if resp.StatusCode != 200 || string(b) != "dev server /y" {
			t.Errorf("by host: %d %s", resp.StatusCode, b)
		}
		<-seen
		resp, b = e.do("GET", "/z", nil, map[string]string{"Host": "3000-" + s.SandboxID + ".e2b.app"})
		if want := map[bool]int{false: 401, true: 200}[public]; resp.StatusCode != want {
			t.Errorf("public %v, no token: %d %s, want %d", public, resp.StatusCode, b, want)
		}
		if public {
			<-seen
		}
		resp, b = e.do("GET", "/", nil, map[string]string{"Host": "4000-" + s.SandboxID + ".e2b.app", "X-Access-Token": s.EnvdAccessToken})
		if resp.StatusCode != 502 || !strings.Contains(string(b), "port 4000") {
			t.Errorf("a closed port: %d %s", resp.StatusCode, b)
		}
	}
}

// A sandbox that ended on its own (its lifetime) is infra's 502 on every
// data-plane route, as the SDKs read "the sandbox is gone", not a
// not_found of the process or file asked for.
func TestEndedSandboxIs502(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	e.sb.mu.Lock()
	delete(e.sb.boxes, s.SandboxID) // expired in the service
	e.sb.mu.Unlock()
	if st, b := e.unary(s, "filesystem.Filesystem/Stat", map[string]any{"path": "x"}, nil); st != 502 || !strings.Contains(string(b), `"sandboxId"`) {
		t.Errorf("Stat in an ended sandbox: %d %s", st, b)
	}
	if e.h.tokens.known(s.SandboxID) {
		t.Error("the ended sandbox's tokens are kept")
	}
}

// signedURL is what the SDK's downloadUrl/uploadUrl give: /files with the
// path, the user and E2B's signature of them under the envd token.
func signedURL(path, op, user, token string, exp int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
		q.Set("signature_expiration", strconv.FormatInt(exp, 10))
	}
	sum := sha256.Sum256([]byte(raw))
	q.Set("signature", "v1_"+base64.RawStdEncoding.EncodeToString(sum[:]))
	return "/files?" + q.Encode()
}

// A signed URL, sent with no header at all, opens that file that way in
// the sandbox that signed it, and nothing else.
func TestSignedURLs(t *testing.T) {
	e := newEnv(t)
	a, b := e.create("base"), e.create("base")
	must(e.sb.WriteFile(t.Context(), a.SandboxID, "f.txt", []byte("secret"), ""))
	must(e.sb.WriteFile(t.Context(), b.SandboxID, "f.txt", []byte("other"), ""))
	if resp, body := e.do("GET", signedURL("f.txt", "read", "", a.EnvdAccessToken, 0), nil, nil); resp.StatusCode != 200 || string(body) != "secret" {
		t.Errorf("download: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.do("GET", signedURL("f.txt", "read", "", b.EnvdAccessToken, time.Now().Unix()+60), nil, nil); resp.StatusCode != 200 || string(body) != "other" {
		t.Errorf("download from b, expiring: %d %s", resp.StatusCode, body)
	}
	h := map[string]string{"Content-Type": "application/octet-stream"}
	if resp, body := e.do("POST", signedURL("up.txt", "write", "", a.EnvdAccessToken, 0), "new", h); resp.StatusCode != 200 {
		t.Errorf("upload: %d %s", resp.StatusCode, body)
	}
	if got := must(e.sb.ReadFile(t.Context(), a.SandboxID, "up.txt", 100)); string(got) != "new" {
		t.Errorf("uploaded %q", got)
	}
	bad := map[string]func() (string, string){
		"a read URL used to write": func() (string, string) { return "POST", signedURL("f.txt", "read", "", a.EnvdAccessToken, 0) },
		"another path": func() (string, string) {
			return "GET", strings.Replace(signedURL("f.txt", "read", "", a.EnvdAccessToken, 0), "f.txt", "g.txt", 1)
		},
		"another user": func() (string, string) {
			return "GET", signedURL("f.txt", "read", "", a.EnvdAccessToken, 0) + "&username=root"
		},
		"expired": func() (string, string) {
			return "GET", signedURL("f.txt", "read", "", a.EnvdAccessToken, time.Now().Unix()-1)
		},
		"a guessed token":   func() (string, string) { return "GET", signedURL("f.txt", "read", "", strings.Repeat("0", 64), 0) },
		"the traffic token": func() (string, string) { return "GET", signedURL("f.txt", "read", "", a.TrafficAccessToken, 0) },
	}
	for name, f := range bad {
		m, u := f()
		if resp, body := e.do(m, u, "x", h); resp.StatusCode != 401 {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	// b's signature with a's id in the header opens nothing of a's.
	hdr := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983"}
	if resp, body := e.do("GET", signedURL("f.txt", "read", "", b.EnvdAccessToken, 0), nil, hdr); resp.StatusCode != 401 {
		t.Errorf("b's signature on a: %d %s", resp.StatusCode, body)
	}
	// A signature opens /files only.
	if resp, _ := e.do("GET", strings.Replace(signedURL("f.txt", "read", "", a.EnvdAccessToken, 0), "/files", "/health", 1), nil, hdr); resp.StatusCode != 401 {
		t.Errorf("a signature opened /health: %d", resp.StatusCode)
	}
}

// A command's stream ends with its sandbox as E2B's does: the connection
// drops (no end event, no end-stream envelope), and /health then says 502.
func TestStreamDropsWithSandbox(t *testing.T) {
	e := newEnv(t)
	s := e.create("base")
	resp := e.openStream(s, "process.Process/Start", runArgs("sleep 60"), nil)
	defer resp.Body.Close()
	readEnvelope(resp.Body) // start
	if r, b := e.api("DELETE", "/sandboxes/"+s.SandboxID, nil); r.StatusCode != 204 {
		t.Fatalf("kill: %d %s", r.StatusCode, b)
	}
	for {
		fl, msg, err := readEnvelope(resp.Body)
		if err != nil {
			break
		}
		t.Errorf("after the kill: envelope %d %s", fl, msg)
	}
	if r, _ := e.do("GET", "/health", nil, envdHdr(s)); r.StatusCode != 502 {
		t.Errorf("health: %d", r.StatusCode)
	}
}

// TestSignedURLExpiredSaysSo: a URL the sandbox signed whose expiration
// passed is a 401 that says so, as envd's; root's relative path is in
// /root; a relative symlink's target is given as a path.
func TestSignedURLExpiredSaysSo(t *testing.T) {
	e := newEnv(t)
	a := e.create("base")
	must(e.sb.WriteFile(t.Context(), a.SandboxID, "f.txt", []byte("x"), ""))
	resp, body := e.do("GET", signedURL("f.txt", "read", "", a.EnvdAccessToken, time.Now().Unix()-10), nil, nil)
	var ae apiError
	json.Unmarshal(body, &ae)
	if resp.StatusCode != 401 || ae.Code != 401 || ae.Message != "signature is already expired" {
		t.Errorf("expired: %d %s", resp.StatusCode, body)
	}
	h := map[string]string{"Content-Type": "application/octet-stream"}
	resp, body = e.do("POST", signedURL("hello.txt", "write", "root", a.EnvdAccessToken, time.Now().Unix()+60), "hi", h)
	var out []map[string]string
	json.Unmarshal(body, &out)
	if resp.StatusCode != 200 || len(out) != 1 || out[0]["path"] != "/root/hello.txt" {
		t.Errorf("upload as root: %d %s, want /root/hello.txt", resp.StatusCode, body)
	}
	if e := entryOf(api.FileInfo{Name: "l", Path: "/home/user/l", Type: "symlink", Target: "t.txt"}); e.SymlinkTarget == nil || *e.SymlinkTarget != "/home/user/t.txt" {
		t.Errorf("symlink target %v, want /home/user/t.txt", e.SymlinkTarget)
	}
}
