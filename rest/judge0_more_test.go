package rest

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/egress"
)

// sdkConfigKeys are the keys the official Python SDK (judge0 0.0.8,
// base_types.py Config) requires of GET /config_info, with their types.
var sdkConfigKeys = map[string]string{
	"allow_enable_network": "bool", "allow_enable_per_process_and_thread_memory_limit": "bool",
	"allow_enable_per_process_and_thread_time_limit": "bool", "allowed_languages_for_compile_options": "list",
	"callbacks_max_tries": "int", "callbacks_timeout": "float", "cpu_extra_time": "float", "cpu_time_limit": "float",
	"enable_additional_files": "bool", "enable_batched_submissions": "bool", "enable_callbacks": "bool",
	"enable_command_line_arguments": "bool", "enable_compiler_options": "bool", "enable_network": "bool",
	"enable_per_process_and_thread_memory_limit": "bool", "enable_per_process_and_thread_time_limit": "bool",
	"enable_submission_delete": "bool", "enable_wait_result": "bool", "maintenance_mode": "bool",
	"max_cpu_extra_time": "float", "max_cpu_time_limit": "float", "max_extract_size": "int", "max_file_size": "int",
	"max_max_file_size": "int", "max_max_processes_and_or_threads": "int", "max_memory_limit": "int",
	"max_number_of_runs": "int", "max_processes_and_or_threads": "int", "max_queue_size": "int",
	"max_stack_limit": "int", "max_submission_batch_size": "int", "max_wall_time_limit": "float",
	"memory_limit": "int", "number_of_runs": "int", "redirect_stderr_to_stdout": "bool", "stack_limit": "int",
	"submission_cache_duration": "float", "use_docs_as_homepage": "bool", "wall_time_limit": "float",
}

// TestJudge0InfoEndpoints: every endpoint of 1.13.1's routes.rb that the
// docs list answers in Judge0's shape, with sandcell's values.
func TestJudge0InfoEndpoints(t *testing.T) {
	ts, fe, _ := newTestServer(t, func(o *Options) { o.Workers = 3 })
	fe.run = hello

	status, _, v := do(t, "GET", ts.URL+"/config_info", "", nil)
	cfg := obj(t, v)
	if status != 200 {
		t.Fatalf("config_info: HTTP %d", status)
	}
	for k, typ := range sdkConfigKeys {
		val, ok := cfg[k]
		switch typ {
		case "bool":
			_, ok = val.(bool)
		case "list":
			_, ok = val.([]any)
		default:
			f, isNum := val.(float64)
			ok = isNum && (typ == "float" || f == float64(int64(f)))
		}
		if !ok {
			t.Errorf("config_info %s = %#v, want a %s", k, val, typ)
		}
	}
	for k, want := range map[string]any{"cpu_time_limit": 5.0, "cpu_extra_time": 1.0, "wall_time_limit": 10.0,
		"memory_limit": 128000.0, "stack_limit": 64000.0, "max_processes_and_or_threads": 60.0, "max_file_size": 1024.0,
		"max_cpu_time_limit": 15.0, "max_wall_time_limit": 20.0, "max_memory_limit": 512000.0, "max_queue_size": 100.0,
		"enable_compiler_options": true, "enable_additional_files": true, "enable_callbacks": false, "enable_network": false} {
		if cfg[k] != want {
			t.Errorf("config_info %s = %v, want %v", k, cfg[k], want)
		}
	}

	status, _, v = do(t, "GET", ts.URL+"/about", "", nil)
	if m := obj(t, v); status != 200 || m["version"] != "1.13.1" || !slices.Equal(keys(m), []string{"homepage", "maintainer", "source_code", "version"}) {
		t.Errorf("about: HTTP %d %v", status, m)
	}
	resp, err := http.Get(ts.URL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "1.13.1" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("version: HTTP %d %q %s", resp.StatusCode, b, resp.Header.Get("Content-Type"))
	}
	status, _, v = do(t, "GET", ts.URL+"/system_info", "", nil)
	if m := obj(t, v); status != 200 || m["CPU(s)"] == nil || m["Architecture"] == nil || m["Mem"] == nil {
		t.Errorf("system_info: HTTP %d %v", status, m)
	}
	status, _, v = do(t, "GET", ts.URL+"/workers", "", nil)
	if l, _ := v.([]any); status != 200 || len(l) != 1 || obj(t, l[0])["available"] != 3.0 || obj(t, l[0])["queue"] != "1.13.1" {
		t.Errorf("workers: HTTP %d %v", status, v)
	}
	status, _, v = do(t, "GET", ts.URL+"/languages/all", "", nil)
	all, _ := v.([]any)
	var archived4, active50 bool
	for _, e := range all {
		m := obj(t, e)
		archived4 = archived4 || m["id"] == 4.0 && m["is_archived"] == true
		active50 = active50 || m["id"] == 50.0 && m["is_archived"] == false && m["name"] == "C (GCC 12.2.0)"
	}
	if status != 200 || !archived4 || !active50 {
		t.Errorf("languages/all: HTTP %d %v, want 50 active and 4 archived", status, all)
	}

	// statistics counts what was submitted since the start.
	do(t, "POST", ts.URL+"/submissions?wait=true", `{"language_id": 71, "source_code": "print(1)"}`, nil)
	do(t, "POST", ts.URL+"/submissions?wait=true", `{"language_id": 4, "source_code": "int main(){}"}`, nil)
	do(t, "POST", ts.URL+"/submissions?wait=true", `{"language_id": 71, "source_code": "print(2)"}`, nil)
	status, _, v = do(t, "GET", ts.URL+"/statistics", "", nil)
	st := obj(t, v)
	subs := obj(t, st["submissions"])
	langs, _ := st["languages"].([]any)
	statuses, _ := st["statuses"].([]any)
	if status != 200 || subs["total"] != 3.0 || subs["today"] != 3.0 || len(obj(t, subs["last_30_days"])) != 30 || len(langs) != 2 ||
		!reflect.DeepEqual(obj(t, langs[0]), map[string]any{"language": map[string]any{"id": 71.0, "name": "Python (3.11.2)"}, "count": 2.0}) ||
		len(statuses) != 1 || obj(t, statuses[0])["count"] != 3.0 || obj(t, st["database"])["size_in_bytes"] == nil {
		t.Errorf("statistics: HTTP %d %v", status, st)
	}
	// Listing and deleting need an authorization token 1.13.1's default
	// configuration does not have: 403; authenticate is 200.
	for _, rt := range []struct {
		method, path string
		status       int
	}{{"DELETE", "/submissions/x", 403}, {"GET", "/submissions?page=1", 403}, {"POST", "/authorize", 403}, {"POST", "/authenticate", 200}} {
		if status, _, _ := do(t, rt.method, ts.URL+rt.path, "", nil); status != rt.status {
			t.Errorf("%s %s: HTTP %d, want %d", rt.method, rt.path, status, rt.status)
		}
	}
	// The new routes refuse other methods as the old ones do.
	if status, _, _ := do(t, "POST", ts.URL+"/config_info", "{}", nil); status != 405 {
		t.Errorf("POST /config_info: HTTP %d, want 405", status)
	}
}

// TestJudge0OlderGCCIds: 48, 49 (C) and 52, 53 (C++) are listed and run
// the catalogue's GCC, their names saying so.
func TestJudge0OlderGCCIds(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	for id, lang := range map[int]string{48: "c", 49: "c", 52: "cpp", 53: "cpp"} {
		status, _, v := do(t, "GET", fmt.Sprintf("%s/languages/%d", ts.URL, id), "", nil)
		if m := obj(t, v); status != 200 || m["is_archived"] != false || !strings.Contains(fmt.Sprint(m["name"]), "GCC 12.2.0; Judge0's id of GCC") {
			t.Errorf("language %d: HTTP %d %v", id, status, m)
		}
		status, _, v = do(t, "POST", ts.URL+"/submissions?wait=true&fields=language_id", fmt.Sprintf(`{"language_id": %d, "source_code": "int main(){}"}`, id), nil)
		if status != 201 || obj(t, v)["language_id"] != float64(id) || fe.last(t).Language != lang {
			t.Errorf("submission to %d: HTTP %d %v, ran %q", id, status, v, fe.last(t).Language)
		}
	}
}

// TestJudge0DefaultLimits: a submission that asks for no limit gets
// 1.13.1's defaults (CPU 5 s + 1 s extra, wall 10 s, 128000 KB, 60
// processes, 1024 KB files), a language that needs more its own.
func TestJudge0DefaultLimits(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	do(t, "POST", ts.URL+"/submissions?wait=true", `{"language_id": 71, "source_code": "print(1)"}`, nil)
	if want := (api.Limits{CPUTimeMS: 6000, TimeoutMS: 10000, MemoryMB: 125, Pids: 60, FileBytes: 1 << 20}); fe.last(t).Limits != want {
		t.Errorf("python limits %+v, want %+v", fe.last(t).Limits, want)
	}
	_, _, v := do(t, "POST", ts.URL+"/submissions?wait=true&fields=memory_limit", `{"language_id": 63, "source_code": "1"}`, nil)
	if got := fe.last(t).Limits; got.MemoryMB != 0 || obj(t, v)["memory_limit"] != float64(512<<10) {
		t.Errorf("javascript (catalogue: 512 MiB): limits %+v, shown %v; want the language's memory", got, v)
	}
}

// TestJudge0TrailingSlashAndForm: Rails ignores a trailing slash and
// parses form bodies.
func TestJudge0TrailingSlashAndForm(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = hello
	status, _, v := do(t, "POST", ts.URL+"/submissions/?wait=true", `{"language_id": 71, "source_code": "x", "stdin": "slash"}`, nil)
	m := obj(t, v)
	if status != 201 || m["stdout"] != "hello, slash\n" {
		t.Fatalf("POST /submissions/: HTTP %d %v", status, m)
	}
	status, _, v = do(t, "GET", ts.URL+"/submissions/"+m["token"].(string)+"/?fields=stdout", "", nil)
	if status != 200 || obj(t, v)["stdout"] != "hello, slash\n" {
		t.Errorf("GET /submissions/TOKEN/: HTTP %d %v", status, v)
	}
	if status, _, _ := do(t, "GET", ts.URL+"/languages/", "", nil); status != 200 {
		t.Errorf("GET /languages/: HTTP %d", status)
	}
	status, _, v = do(t, "POST", ts.URL+"/submissions?wait=true&fields=stdout,language_id",
		"language_id=71&source_code=print%28input%28%29%29&stdin=form+body", map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if status != 201 || obj(t, v)["stdout"] != "hello, form\n" || obj(t, v)["language_id"] != 71.0 || string(fe.last(t).Source) != "print(input())" {
		t.Errorf("form body: HTTP %d %v", status, v)
	}
}

// zipOf is a zip of name -> content; a name ending in "@" is a symlink
// to its content, "*" an executable.
func zipOf(t *testing.T, files ...[2]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: strings.TrimRight(f[0], "@*"), Method: zip.Deflate}
		switch {
		case strings.HasSuffix(f[0], "@"):
			h.SetMode(0o777 | 1<<27) // fs.ModeSymlink
		case strings.HasSuffix(f[0], "*"):
			h.SetMode(0o755)
		default:
			h.SetMode(0o644)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f[1]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// TestJudge0OptionsAndFiles: compiler_options and command_line_arguments
// are split into argv (no shell sees them); additional_files is unpacked
// into /work within bounds, zip-slip and links refused.
func TestJudge0OptionsAndFiles(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	body := fmt.Sprintf(`{"language_id": 50, "source_code": "int main(){}", "compiler_options": "-O3 -DNAME='a b' $(reboot);",
		"command_line_arguments": "x 'y z'", "additional_files": %q}`, zipOf(t, [2]string{"data/in.txt", "42\n"}, [2]string{"run.sh*", "echo hi"}, [2]string{"main.c", "not the source"}))
	status, _, v := do(t, "POST", ts.URL+"/submissions?wait=true&fields=compiler_options,additional_files,status_id", body, nil)
	if status != 201 {
		t.Fatalf("HTTP %d %v", status, v)
	}
	req := fe.last(t)
	if want := []string{"-O3", "-DNAME=a b", "(reboot)"}; !slices.Equal(req.CompilerOptions, want) {
		t.Errorf("compiler options %q, want %q", req.CompilerOptions, want)
	}
	if want := []string{"x", "y z"}; !slices.Equal(req.Args, want) {
		t.Errorf("args %q, want %q", req.Args, want)
	}
	got := map[string]string{}
	for _, f := range req.Files {
		got[fmt.Sprintf("%s %o", f.Path, f.Mode)] = string(f.Data)
	}
	if want := map[string]string{"data/in.txt 644": "42\n", "run.sh 755": "echo hi"}; !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v (main.c of the zip must not replace the source)", got, want)
	}
	if m := obj(t, v); m["compiler_options"] != "-O3 -DNAME='a b' $(reboot);" || m["additional_files"] == nil {
		t.Errorf("shown back: %v", m)
	}

	bomb := func() string {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create("zeros")
		w.Write(make([]byte, judge0MaxExtractBytes+1))
		zw.Close()
		return base64.StdEncoding.EncodeToString(buf.Bytes())
	}()
	var many [][2]string
	for i := range judge0MaxExtractFiles + 1 {
		many = append(many, [2]string{fmt.Sprintf("f%d", i), ""})
	}
	for _, tc := range []struct{ name, zip, msg string }{
		{"zip-slip", zipOf(t, [2]string{"../../etc/cron.d/x", "boom"}), "outside the working directory"},
		{"absolute", zipOf(t, [2]string{"/etc/passwd", "boom"}), "outside the working directory"},
		{"symlink", zipOf(t, [2]string{"link@", "/etc/shadow"}), "links are refused"},
		{"bomb", bomb, "unpacks to more than 10240 KB"},
		{"too many", zipOf(t, many...), "more than 1000 files"},
		{"not base64", "%%%", "is not valid Base64"},
	} {
		before := fe.count()
		status, _, v := do(t, "POST", ts.URL+"/submissions", fmt.Sprintf(`{"language_id": 71, "source_code": "x", "additional_files": %q}`, tc.zip), nil)
		if msg := fmt.Sprint(obj(t, v)["additional_files"]); status != 422 || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: HTTP %d %v, want 422 with %q", tc.name, status, v, tc.msg)
		}
		time.Sleep(5 * time.Millisecond)
		if fe.count() != before {
			t.Errorf("%s: the executor ran", tc.name)
		}
	}
}

// TestJudge0Callback: a finished submission is PUT to its callback_url,
// Base64 and Judge0's default fields, when the operator allowlisted the
// host; any other target is refused before anything runs (SSRF).
func TestJudge0Callback(t *testing.T) {
	got := make(chan map[string]any, 4)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		m["_method"], m["_type"] = r.Method, r.Header.Get("Content-Type")
		got <- m
	}))
	defer cb.Close()
	_, port, _ := net.SplitHostPort(cb.Listener.Addr().String())
	ts, fe, _ := newTestServer(t, func(o *Options) {
		o.Judge0Callbacks = egress.Config{Allow: []string{"callback.test:" + port},
			Hosts: map[string][]netip.Addr{"callback.test": {netip.MustParseAddr("127.0.0.1")}}}
	})
	fe.run = hello
	status, _, v := do(t, "POST", ts.URL+"/submissions", `{"language_id": 71, "source_code": "x", "stdin": "cb",
		"callback_url": "http://callback.test:`+port+`/done"}`, nil)
	if status != 201 {
		t.Fatalf("HTTP %d %v", status, v)
	}
	select {
	case m := <-got:
		if m["_method"] != "PUT" || m["_type"] != "application/json" || m["stdout"] != "aGVsbG8sIGNiCg==\n" || m["token"] != obj(t, v)["token"] ||
			!reflect.DeepEqual(m["status"], map[string]any{"id": 3.0, "description": "Accepted"}) {
			t.Errorf("callback got %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no callback within 5 s")
	}
	for _, url := range []string{"http://127.0.0.1:" + port + "/", "http://other.test:" + port + "/", "http://callback.test:1/",
		"file:///etc/passwd", "http://169.254.169.254/latest/meta-data/"} {
		before := fe.count()
		status, _, v := do(t, "POST", ts.URL+"/submissions", `{"language_id": 71, "source_code": "x", "callback_url": "`+url+`"}`, nil)
		if msg := fmt.Sprint(obj(t, v)["callback_url"]); status != 422 || !strings.Contains(msg, "refused") && !strings.Contains(msg, "not an http") {
			t.Errorf("%s: HTTP %d %v, want 422", url, status, v)
		}
		time.Sleep(5 * time.Millisecond)
		if fe.count() != before {
			t.Errorf("%s: the executor ran", url)
		}
	}
	select {
	case m := <-got:
		t.Errorf("a refused target was called: %v", m)
	default:
	}
}

// TestJudge0CallbackBounded: a callback target that never answers is
// given up within the tries' timeouts, and Close does not wait longer.
func TestJudge0CallbackBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accepts and never answers
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	c, err := newCallbacker(egress.Config{Allow: []string{"slow.test:" + port},
		Hosts: map[string][]netip.Addr{"slow.test": {netip.MustParseAddr("127.0.0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	c.client.Timeout = 100 * time.Millisecond
	start := time.Now()
	err = c.call(context.Background(), "http://slow.test:"+port+"/", []byte("{}"))
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("a silent target: %v after %v, want a timeout after 3 tries of 100 ms", err, time.Since(start))
	}
}

// TestJudge0BinaryOutput: a byte that is not UTF-8 comes back as that
// byte with base64_encoded=true (not U+FFFD), and without base64 the
// submission gets Judge0's documented error.
func TestJudge0BinaryOutput(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(context.Context, executor.Request) api.Result {
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "a\uFFFDb", StdoutBytes: []byte("a\xfeb\x1b[0m"),
			Stderr: "", StderrBytes: []byte{}}}
	}
	status, _, v := do(t, "POST", ts.URL+"/submissions?wait=true&base64_encoded=true&fields=stdout,stderr", `{"language_id": 71, "source_code": "eA=="}`, nil)
	m := obj(t, v)
	if want := base64.StdEncoding.EncodeToString([]byte("a\xfeb\x1b[0m")) + "\n"; status != 201 || m["stdout"] != want || m["stderr"] != nil {
		t.Errorf("base64: HTTP %d %v, want stdout %q", status, m, want)
	}
	status, _, v = do(t, "POST", ts.URL+"/submissions?wait=true&fields=stdout,token", `{"language_id": 71, "source_code": "x"}`, nil)
	m = obj(t, v)
	if status != 201 || m["error"] != "some attributes for this submission cannot be converted to UTF-8, use base64_encoded=true query parameter" {
		t.Errorf("not base64: HTTP %d %v, want Judge0's UTF-8 error", status, m)
	}
	status, _, v = do(t, "GET", ts.URL+"/submissions/"+fmt.Sprint(m["token"])+"?fields=stdout", "", nil)
	if status != 400 || !strings.Contains(fmt.Sprint(obj(t, v)["error"]), "cannot be converted to UTF-8") {
		t.Errorf("GET not base64: HTTP %d %v", status, v)
	}
	// expected_output is compared with the bytes, as Judge0 compares
	// them: the cleaned text "a\uFFFDb" is not what was printed.
	_, _, v = do(t, "POST", ts.URL+"/submissions?wait=true&base64_encoded=true&fields=status_id",
		`{"language_id": 71, "source_code": "eA==", "expected_output": "`+base64.StdEncoding.EncodeToString([]byte("a\uFFFDb"))+`"}`, nil)
	if obj(t, v)["status_id"] != 4.0 {
		t.Errorf("expected the cleaned text: %v, want Wrong Answer", v)
	}
}

// TestJudge0CallbacksInFlightBounded: callbacks to a target that holds
// every request are at most judge0CallbacksInFlight at once; the rest are
// dropped, not queued as goroutines holding their bodies.
func TestJudge0CallbacksInFlightBounded(t *testing.T) {
	var arrived atomic.Int64
	release := make(chan struct{})
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-release
	}))
	defer cb.Close()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free() // before cb.Close, which waits for the held requests
	_, port, _ := net.SplitHostPort(cb.Listener.Addr().String())
	ts, fe, _ := newTestServer(t, func(o *Options) {
		o.Judge0Callbacks = egress.Config{Allow: []string{"callback.test:" + port},
			Hosts: map[string][]netip.Addr{"callback.test": {netip.MustParseAddr("127.0.0.1")}}}
	})
	t.Cleanup(free) // before the server's Close waits for its callbacks
	fe.run = hello
	n := judge0CallbacksInFlight + 16
	for i := range n {
		status, _, v := do(t, "POST", ts.URL+"/submissions?wait=true", `{"language_id": 71, "source_code": "x",
			"callback_url": "http://callback.test:`+port+`/done"}`, nil)
		if status != 201 {
			t.Fatalf("submission %d: HTTP %d %v", i, status, v)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for arrived.Load() < judge0CallbacksInFlight && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // room for any beyond the bound to arrive
	if got := arrived.Load(); got != judge0CallbacksInFlight {
		t.Errorf("%d callbacks under way for %d finished submissions, want the bound %d", got, n, judge0CallbacksInFlight)
	}
}

// TestJudge0EnableNetwork: Judge0 CE's enable_network maps onto the
// operator's allowlist for the language (--network-allow): true gives the
// program all of it, false or absent none; a language the operator allows
// no host is refused in Judge0's words before anything runs. The
// submission shows what it was given; config_info says network may be
// enabled.
func TestJudge0EnableNetwork(t *testing.T) {
	ts, fe, _ := newTestServer(t, func(o *Options) {
		o.NetworkAllow = map[string][]string{"*": {"*.pypi.org:443"}, "python": {"git.test"}}
	})
	fe.run = hello
	status, _, v := do(t, "POST", ts.URL+"/submissions?wait=true&fields=enable_network,status_id", `{"language_id":71,"source_code":"print(1)","enable_network":true}`, nil)
	if m := obj(t, v); status != 201 || m["enable_network"] != true {
		t.Errorf("enabled: HTTP %d %v", status, v)
	}
	if n := fe.last(t).Network; n == nil || !slices.Equal(n.Allow, []string{"*.pypi.org:443", "git.test"}) {
		t.Errorf("enabled: the run's network %+v, want the operator's allowlist for python", n)
	}
	for _, body := range []string{`{"language_id":71,"source_code":"print(1)","enable_network":false}`, `{"language_id":71,"source_code":"print(1)"}`} {
		status, _, v = do(t, "POST", ts.URL+"/submissions?wait=true&fields=enable_network", body, nil)
		if m := obj(t, v); status != 201 || m["enable_network"] != false || fe.last(t).Network != nil {
			t.Errorf("%s: HTTP %d %v, network %+v; want none", body, status, v, fe.last(t).Network)
		}
	}
	_, _, v = do(t, "GET", ts.URL+"/config_info", "", nil)
	if m := obj(t, v); m["allow_enable_network"] != true {
		t.Errorf("config_info allow_enable_network %v", m["allow_enable_network"])
	}
	ts, fe, _ = newTestServer(t, func(o *Options) { o.NetworkAllow = map[string][]string{"javascript": {"git.test"}} })
	status, _, v = do(t, "POST", ts.URL+"/submissions?wait=true", `{"language_id":71,"source_code":"print(1)","enable_network":true}`, nil)
	if m := obj(t, v); status != 422 || fmt.Sprint(m["enable_network"]) != "[enabling network is not allowed]" || fe.count() != 0 {
		t.Errorf("python without an allowance: HTTP %d %v, %d runs", status, v, fe.count())
	}
}
