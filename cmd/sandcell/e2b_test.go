package main

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/e2b"
	"github.com/sandcell/sandcell/interp"
)

// noSandboxes is an api.Sandboxes with none; its other calls are not made
// here (they would panic on the nil interface).
type noSandboxes struct{ sandboxesAPI }

// sandboxesAPI names the embedded interface apart from its Sandboxes method.
type sandboxesAPI = api.Sandboxes

func (noSandboxes) Sandboxes(context.Context) ([]api.SandboxInfo, error) { return nil, nil }

// E2B's routes sit at the root beside sandcell's own: the control plane and
// anything naming a sandbox go to e2b, every sandcell route to next.
func TestMountE2B(t *testing.T) {
	key := e2b.NewKey()
	kf := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(kf, []byte(key+"\n"), 0o600)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "sandcell") })
	h, err := mountE2B(next, noSandboxes{}, nil, nil, config.Serve{E2B: true, HTTP: ":0", E2BKeyFile: kf}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(method, path string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/mcp", "/api/v2/runtimes", "/submissions", "/run_code", "/metrics", "/healthz", "/health", "/files"} {
		if st, b := get("GET", p, nil); st != 200 || b != "sandcell" {
			t.Errorf("GET %s went to E2B: %d %s", p, st, b)
		}
	}
	if st, b := get("GET", "/v2/sandboxes", map[string]string{"X-API-Key": key}); st != 200 || strings.TrimSpace(b) != "[]" {
		t.Errorf("E2B list: %d %s", st, b)
	}
	if st, b := get("POST", "/sandboxes", nil); st != 401 || !strings.Contains(b, `"code":401`) {
		t.Errorf("E2B create without a key: %d %s", st, b)
	}
	if st, _ := get("GET", "/health", map[string]string{"E2b-Sandbox-Id": "abc"}); st != 502 {
		t.Errorf("a data-plane request for no sandbox: %d", st)
	}

	os.WriteFile(kf, []byte("not a key\n"), 0o600)
	if _, err := mountE2B(next, noSandboxes{}, nil, nil, config.Serve{E2BKeyFile: kf}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a bad key file was taken")
	}
	if err := (&config.Serve{E2B: true, HTTP: ":8080"}).Validate(); err == nil {
		t.Error("--e2b without --e2b-key-file validated")
	}
}

// A cell's events become the outputs of E2B's /execute stream that the
// SDK reads: output by stream, the value as the main result, an image in
// base64 under its type, a raised error, the execution count.
func TestE2BOutputOfCellEvents(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nrest")
	for _, c := range []struct {
		ev   interp.Event
		want e2b.Output
	}{
		{interp.Event{Stream: "stdout", Text: "hi\n"}, e2b.Output{Type: "stdout", Text: "hi\n"}},
		{interp.Event{Stream: "stderr", Text: "oops"}, e2b.Output{Type: "stderr", Text: "oops"}},
		{interp.Event{Result: &interp.Result{Text: "42", Main: true}}, e2b.Output{Type: "result", Result: &e2b.Result{Text: "42", IsMainResult: true}}},
		{interp.Event{Result: &interp.Result{Text: "df", HTML: "<table/>", Main: true}}, e2b.Output{Type: "result", Result: &e2b.Result{Text: "df", HTML: "<table/>", IsMainResult: true}}},
		{interp.Event{Result: &interp.Result{Image: png, MIME: "image/png"}}, e2b.Output{Type: "result", Result: &e2b.Result{PNG: base64.StdEncoding.EncodeToString(png)}}},
		{interp.Event{Result: &interp.Result{Image: []byte("GIF89a"), MIME: "image/gif"}}, e2b.Output{Type: "result", Result: &e2b.Result{Text: "(an image of type image/gif, which E2B's results do not carry)"}}},
		{interp.Event{Error: &interp.CellError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback ..."}},
			e2b.Output{Type: "error", Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback ..."}},
		{interp.Event{ExecutionCount: 3}, e2b.Output{Type: "number_of_executions", ExecutionCount: 3}},
	} {
		if got := outputOf(c.ev); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: %+v (result %+v), want %+v (result %+v)", c.ev, got, got.Result, c.want, c.want.Result)
		}
	}
}
