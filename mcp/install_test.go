package mcp

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeInstaller records installs; a set seen before is cached.
type fakeInstaller struct {
	mu   sync.Mutex
	seen map[string]bool
	reqs []InstallRequest
}

func (f *fakeInstaller) InstallDependencies(_ context.Context, req InstallRequest) (InstallResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if slices.Contains(req.Packages, "broken") {
		return InstallResult{}, errors.New("pip install of broken failed")
	}
	set := slices.Sorted(slices.Values(req.Packages))
	key := strings.Join(set, " ")
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	cached := f.seen[key]
	f.seen[key] = true
	return InstallResult{Language: req.Language, Requirements: set, Layer: "0123456789abcdef", Cached: cached, Bytes: 42,
		Files: 3, MountPath: "/tmp/deps", Env: []string{"PYTHONPATH=/tmp/deps"}, SessionID: req.SessionID}, nil
}

func TestInstallTool(t *testing.T) {
	s := NewServer(&Options{Name: "sandcell-test", Version: "0.0.1"})
	f := &fakeSandbox{}
	in := &fakeInstaller{}
	AddSandboxTools(s, f, &SandboxOptions{ExecuteToolOptions: ExecuteToolOptions{Languages: []string{"python", "py"}, ProgressEvery: 20 * time.Millisecond},
		Installer: in, InstallLanguages: []string{"python", "py"}})
	c := dialSandbox(t, s, nil)

	tool := c.tools["install_dependencies"]
	if tool == nil {
		t.Fatal("install_dependencies is not listed")
	}
	ann := tool["annotations"].(map[string]any)
	if ann["openWorldHint"] != true || ann["readOnlyHint"] != false || ann["destructiveHint"] != false || ann["idempotentHint"] != true {
		t.Errorf("annotations %v", ann)
	}
	props := c.tools["execute_code"]["inputSchema"].(map[string]any)["properties"].(map[string]any)
	if _, ok := props["dependencies"]; !ok {
		t.Error("execute_code has no dependencies argument on a server that installs")
	}

	r := c.tool("install_dependencies", map[string]any{"language": "py", "packages": []any{"requests==2.31.0"}})
	sc := r["structuredContent"].(map[string]any)
	if r["isError"] == true || sc["cached"] != false || sc["mount_path"] != "/tmp/deps" {
		t.Errorf("first install: %v", r)
	}
	r = c.tool("install_dependencies", map[string]any{"language": "py", "packages": []any{"requests==2.31.0"}})
	if sc := r["structuredContent"].(map[string]any); sc["cached"] != true {
		t.Errorf("second install: %v", r)
	}
	for _, args := range []map[string]any{
		{"language": "py", "packages": []any{}},
		{"language": "py", "packages": []any{"--index-url=http://evil/"}},
		{"language": "cobol", "packages": []any{"x"}},
		{"language": "py"},
	} {
		n := len(in.reqs)
		r := c.tool("install_dependencies", args)
		if r["isError"] != true || len(in.reqs) != n {
			t.Errorf("install_dependencies %v: %v (reached the installer: %v)", args, r, len(in.reqs) != n)
		}
	}
	r = c.tool("install_dependencies", map[string]any{"language": "python", "packages": []any{"broken"}})
	if r["isError"] != true || !strings.Contains(mustJSON(r), "broken failed") {
		t.Errorf("failed install: %v", r)
	}

	c.tool("execute_code", map[string]any{"language": "python", "source": "import requests", "dependencies": []any{"requests==2.31.0"}})
	if got := f.lastRun(t).Dependencies; !slices.Equal(got, []string{"requests==2.31.0"}) {
		t.Errorf("execute_code passed dependencies %q", got)
	}
}

// TestNoInstaller: a server with installs off has no install tool, and
// execute_code refuses dependencies.
func TestNoInstaller(t *testing.T) {
	s, _, _ := sandboxServer(t)
	c := dialSandbox(t, s, nil)
	if _, ok := c.tools["install_dependencies"]; ok {
		t.Error("install_dependencies listed with installs off")
	}
	r := c.tool("execute_code", map[string]any{"language": "python", "source": "1", "dependencies": []any{"x"}})
	if r["isError"] != true {
		t.Errorf("dependencies accepted with installs off: %v", r)
	}
}
