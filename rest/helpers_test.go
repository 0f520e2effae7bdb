package rest

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/rootfs"
)

// fakeExecutor stands in for the executor: it records each request and
// answers with run(req), after calling req.Admit as the executor does.
// PhaseLimits is the executor's own rule (limits.Resolve over the
// defaults raised by the language's adjustments, clamped to the ceilings).
type fakeExecutor struct {
	mu    sync.Mutex
	calls []executor.Request
	run   func(ctx context.Context, req executor.Request) api.Result
}

func (f *fakeExecutor) Execute(ctx context.Context, req executor.Request) (api.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.mu.Unlock()
	if req.Admit != nil {
		release, err := req.Admit(ctx)
		if err != nil {
			return api.Result{}, err
		}
		defer release()
	}
	if f.run == nil {
		return api.Result{Phase: api.Phase{Status: api.StatusOK}}, nil
	}
	return f.run(ctx, req), nil
}

func (f *fakeExecutor) PhaseLimits(adj, req api.Limits) (limits.Set, []string, error) {
	raise, err := limits.FromRequest(adj)
	if err != nil {
		return limits.Set{}, nil, err
	}
	want, err := limits.FromRequest(req)
	if err != nil {
		return limits.Set{}, nil, err
	}
	return limits.Resolve(limits.Defaults().Raise(raise), testCeilings(), want)
}

func (f *fakeExecutor) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeExecutor) last(t *testing.T) executor.Request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		t.Fatal("the executor was not called")
	}
	return f.calls[len(f.calls)-1]
}

// testCeilings are limits.Ceilings with a fixed CPU count.
func testCeilings() limits.Set {
	c := limits.Ceilings()
	c.CPUs = 2
	return c
}

// testLanguages are catalogue languages as if built, with Debian versions
// like this host's.
func testLanguages(t testing.TB) func() ([]Language, error) {
	versions := map[string]string{"python": "3.11.2-1+b1", "javascript": "18.20.4+dfsg-1~deb12u3", "c": "4:12.2.0-3",
		"cpp": "4:12.2.0-3", "bash": "5.2.15-2+b13", "ruby": "1:3.1", "go": "2:1.19~1"}
	var out []Language
	for _, name := range []string{"python", "javascript", "c", "cpp", "bash", "ruby", "go"} {
		l, err := rootfs.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Language{Language: l, Package: versions[name], Version: SemVer(versions[name])})
	}
	return func() ([]Language, error) { return out, nil }
}

// newTestServer serves a Handler over a fake executor.
func newTestServer(t *testing.T, mod func(*Options)) (*httptest.Server, *fakeExecutor, *Handler) {
	t.Helper()
	fe := &fakeExecutor{}
	opts := Options{Executor: fe, Languages: testLanguages(t), Ceilings: testCeilings(), Workers: 2}
	if mod != nil {
		mod(&opts)
	}
	h := New(opts)
	ts := httptest.NewServer(h)
	t.Cleanup(func() { ts.Close(); h.Close() })
	return ts, fe, h
}

// do sends a request and returns the status, headers and the decoded JSON
// body (nil when not JSON).
func do(t *testing.T, method, url, body string, hdr map[string]string) (int, http.Header, any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v any
	if json.Unmarshal(b, &v) != nil {
		v = nil
		t.Logf("%s %s: HTTP %d, not JSON: %q", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, v
}

// obj is v as a JSON object, failing the test otherwise.
func obj(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("not a JSON object: %#v", v)
	}
	return m
}

// keys are an object's keys, sorted.
func keys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// eventually polls f until it returns true or d passes.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
