package conformance

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// judge0SDK is the src directory of the official Judge0 Python SDK, judge0
// 0.0.8 from its tagged source (github judge0/judge0-python, tag v0.0.8),
// kept outside the repository: $SANDCELL_JUDGE0_SDK (the checkout or its
// src directory), else /usr/local/src/judge0-python. PyPI is not reached
// here; nothing of the SDK is copied into this tree.
func judge0SDK(t *testing.T) string {
	t.Helper()
	dirs := []string{os.Getenv("SANDCELL_JUDGE0_SDK"), "/usr/local/src/judge0-python"}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		for _, src := range []string{filepath.Join(d, "src"), d} {
			if _, err := os.Stat(filepath.Join(src, "judge0", "clients.py")); err == nil {
				return src
			}
		}
	}
	t.Skip("the Judge0 Python SDK 0.0.8 source is not here: set SANDCELL_JUDGE0_SDK to a checkout of judge0/judge0-python at tag v0.0.8")
	return ""
}

// sdkPython is a python3 with what the SDK imports: pydantic 2 of its
// own, httpx of its own or Debian's python3-httpx.
func sdkPython(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 not found")
	}
	check := `import sys; sys.path.append("/usr/lib/python3/dist-packages"); import httpx, pydantic; assert pydantic.VERSION >= "2", pydantic.VERSION`
	if out, err := exec.Command(python, "-c", check).CombinedOutput(); err != nil {
		t.Fatalf("%s lacks what the Judge0 SDK needs (httpx: apt-get install python3-httpx; pydantic 2): %v\n%s", python, err, out)
	}
	return python
}

// TestJudge0PythonSDK: the official Judge0 Python SDK (judge0 0.0.8,
// unmodified) runs its README's flows against sandcell: judge0.Client()
// (it reads /languages, /config_info and /about first), Python, C and
// C++ (judge0.CPP is id 52), stdin, test cases one language and several
// (the batch routes), asynchronous execution and wait, and a byte that is
// not UTF-8 coming back as that byte.
func TestJudge0PythonSDK(t *testing.T) {
	src := judge0SDK(t)
	python := sdkPython(t)
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	requireRuntimes(t, addr, "python", "c", "c++")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "testdata/judge0_sdk.py", "http://"+addr, src)
	cmd.Env = append(os.Environ(), "JUDGE0_SUPPRESS_PREVIEW_WARNING=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("judge0_sdk.py: %v\n%s", err, out)
	}
	var r map[string]json.RawMessage
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	t.Logf("SDK flows: %s", out)
	var client struct {
		Version      string  `json:"version"`
		Languages    int     `json:"languages"`
		CPU          float64 `json:"cpu_time_limit"`
		Memory       int     `json:"memory_limit"`
		CPPSupported bool    `json:"cpp_supported"`
	}
	if err := json.Unmarshal(r["client"], &client); err != nil || client.Version != "1.13.1" || client.Languages < 3 ||
		client.CPU != 5 || client.Memory != 128000 || !client.CPPSupported {
		t.Errorf("judge0.Client(): %s", r["client"])
	}
	type res struct {
		Stdout *string `json:"stdout"`
		Status int     `json:"status"`
	}
	one := func(name, stdout string) {
		t.Helper()
		var got res
		if err := json.Unmarshal(r[name], &got); err != nil || got.Stdout == nil || *got.Stdout != stdout || got.Status != 3 {
			t.Errorf("%s: %s, want stdout %q accepted", name, r[name], stdout)
		}
	}
	one("hello_python", "hello, world\n")
	one("hello_c", "hello, world\n")
	one("hello_cpp", "hello, c++\n")
	one("stdin_c", "8\nHello, Bob!\n")
	one("execute_async", "42\n")
	one("binary_output", `a\xfeb`+"\n")
	for name, n := range map[string]int{"test_cases": 3, "test_cases_languages": 6} {
		var got []res
		if err := json.Unmarshal(r[name], &got); err != nil || len(got) != n {
			t.Errorf("%s: %s, want %d results", name, r[name], n)
			continue
		}
		for i, g := range got {
			who := []string{"Bob", "Alice", "Charlie"}[i%3]
			if g.Stdout == nil || *g.Stdout != fmt.Sprintf("Hello, %s!\n", who) || g.Status != 3 {
				t.Errorf("%s %d: %+v, want Hello, %s! accepted", name, i, g, who)
			}
		}
	}
}

// TestJudge0EndpointsEndToEnd: the information endpoints, a trailing
// slash, a form body, compiler_options, command_line_arguments and
// additional_files against real sandboxes.
func TestJudge0EndpointsEndToEnd(t *testing.T) {
	got := make(chan map[string]any, 2)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		m["method"] = r.Method
		got <- m
	}))
	defer cb.Close()
	_, cbPort, _ := net.SplitHostPort(cb.Listener.Addr().String())
	addr := freeAddr(t)
	startServer(t, sandcellCommandWith(t, []string{"--sessions-dir", sessionsDir(t), "--egress-host", "callback.test=127.0.0.1"},
		"--http", addr, "--judge0-callback-allow", "callback.test:"+cbPort), addr)
	requireRuntimes(t, addr, "c", "python")
	base := "http://" + addr
	hc := http.DefaultClient
	for _, p := range []string{"/config_info", "/about", "/languages/all", "/system_info", "/workers", "/statistics", "/languages/52"} {
		if status, _, v := restCall(t, hc, "GET", base+p, "", nil); status != 200 || v == nil {
			t.Errorf("GET %s: HTTP %d %v", p, status, v)
		}
	}
	// compiler_options reach gcc as argv: -DGREETING='"hi there"' defines
	// a string; command_line_arguments reach the program; $(...) and ;
	// are removed as Judge0 removes them, no shell runs them.
	c := `#include <stdio.h>\nint main(int c, char **v) { printf(\"%s %d %s\\n\", GREETING, c - 1, c > 1 ? v[1] : \"-\"); return 0; }`
	status, _, v := restCall(t, hc, "POST", base+"/submissions/?wait=true&fields=stdout,status_id,compile_output",
		`{"language_id": 52, "source_code": "`+c+`", "compiler_options": "-DGREETING='\"hi there\"' -O0", "command_line_arguments": "'a b' $(id)"}`, nil)
	if m := jsonObj(v); status != 201 || m["stdout"] != "hi there 2 a b\n" || m["status_id"] != 3.0 {
		t.Errorf("compiler options and arguments: HTTP %d %v", status, m)
	}
	// additional_files: a zip with data.txt, read by the program.
	archive := judge0Zip(t, "data.txt", "from the zip\n")
	status, _, v = restCall(t, hc, "POST", base+"/submissions?wait=true&fields=stdout,status_id",
		`{"language_id": 71, "source_code": "print(open('data.txt').read(), end='')", "additional_files": "`+archive+`"}`, nil)
	if m := jsonObj(v); status != 201 || m["stdout"] != "from the zip\n" {
		t.Errorf("additional_files: HTTP %d %v", status, m)
	}
	// A form body, as Rails parses one.
	status, _, v = restCall(t, hc, "POST", base+"/submissions?wait=true&fields=stdout",
		"language_id=71&source_code="+strings.ReplaceAll("print(6*7)", "(", "%28"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if m := jsonObj(v); status != 201 || m["stdout"] != "42\n" {
		t.Errorf("form body: HTTP %d %v", status, m)
	}
	// callback_url: the allowlisted loopback server gets the PUT; a host
	// not on the list is refused before anything runs.
	status, _, v = restCall(t, hc, "POST", base+"/submissions",
		`{"language_id": 71, "source_code": "print(7)", "callback_url": "http://callback.test:`+cbPort+`/r"}`, nil)
	if status != 201 {
		t.Errorf("callback submission: HTTP %d %v", status, v)
	}
	select {
	case m := <-got:
		if m["method"] != "PUT" || m["stdout"] != "Nwo=\n" || m["token"] != jsonObj(v)["token"] {
			t.Errorf("callback: %v", m)
		}
	case <-time.After(30 * time.Second):
		t.Error("no callback within 30 s")
	}
	status, _, v = restCall(t, hc, "POST", base+"/submissions",
		`{"language_id": 71, "source_code": "print(7)", "callback_url": "http://127.0.0.1:`+cbPort+`/r"}`, nil)
	if status != 422 || !strings.Contains(fmt.Sprint(jsonObj(v)["callback_url"]), "refused") {
		t.Errorf("callback to an IP: HTTP %d %v, want 422", status, v)
	}
	// A byte that is not UTF-8: its Base64, or Judge0's error.
	status, _, v = restCall(t, hc, "POST", base+"/submissions?wait=true&base64_encoded=true&fields=stdout",
		`{"language_id": 71, "source_code": "aW1wb3J0IHN5czsgc3lzLnN0ZG91dC5idWZmZXIud3JpdGUoYidhXHhmZWJcbicp"}`, nil)
	if m := jsonObj(v); status != 201 || m["stdout"] != "Yf5iCg==\n" {
		t.Errorf("binary output: HTTP %d %v, want Yf5iCg==", status, m)
	}
}

// judge0Zip is a zip holding one file, in Base64.
func judge0Zip(t *testing.T, name, content string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(content))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}
