package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/e2b"
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
	h, err := mountE2B(next, noSandboxes{}, nil, config.Serve{E2B: true, HTTP: ":0", E2BKeyFile: kf}, slog.New(slog.DiscardHandler))
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
	if _, err := mountE2B(next, noSandboxes{}, nil, config.Serve{E2BKeyFile: kf}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a bad key file was taken")
	}
	if err := (&config.Serve{E2B: true, HTTP: ":8080"}).Validate(); err == nil {
		t.Error("--e2b without --e2b-key-file validated")
	}
}
