package e2b

import (
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

func itoa(n int) string                  { return strconv.Itoa(n) }
func decodeB64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

// must is v, or a panic (a failed test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The create answer carries every field the SDKs read (and Python's
// requires on a 201): templateID, sandboxID, clientID, envdVersion,
// envdAccessToken; both create paths; key in X-API-Key or as a bearer.
func TestCreate(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		for _, hdr := range []map[string]string{{"X-API-Key": testKey}, {"Authorization": "Bearer " + testKey}} {
			resp, b := e.do("POST", p, map[string]any{"templateID": "base", "timeout": 60, "metadata": map[string]string{"k": "v"}}, hdr)
			if resp.StatusCode != 201 {
				t.Fatalf("POST %s: %d %s", p, resp.StatusCode, b)
			}
			var m map[string]any
			json.Unmarshal(b, &m)
			for _, f := range []string{"templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken", "trafficAccessToken"} {
				if s, _ := m[f].(string); s == "" {
					t.Errorf("POST %s: %s missing in %s", p, f, b)
				}
			}
			if v, ok := m["domain"]; !ok || v != nil {
				t.Errorf("domain %v: want null (the SDK then keeps E2B_DOMAIN)", v)
			}
			if m["templateID"] != "base" || m["envdVersion"] != EnvdVersion {
				t.Errorf("got %s", b)
			}
		}
	}
	// The template's spec reached the service, with the lifetime asked.
	info := must(e.sb.Sandbox(t.Context(), "sbx0001"))
	if info.Metadata["k"] != "v" || info.EndAt.Sub(info.StartedAt).Seconds() != 60 {
		t.Errorf("service saw %+v", info)
	}
}

func TestControlPlaneRefusesWithoutKey(t *testing.T) {
	e := newEnv(t)
	for _, hdr := range []map[string]string{nil, {"X-API-Key": "e2b_" + strings.Repeat("f", 40)}, {"Authorization": "Bearer nope"}} {
		resp, b := e.do("POST", "/v2/sandboxes", map[string]any{"templateID": "base"}, hdr)
		var ae apiError
		json.Unmarshal(b, &ae)
		if resp.StatusCode != 401 || ae.Code != 401 || ae.Message == "" {
			t.Errorf("%v: %d %s, want 401 {code, message}", hdr, resp.StatusCode, b)
		}
	}
	if n := len(must(e.sb.Sandboxes(t.Context()))); n != 0 {
		t.Errorf("%d sandboxes made without a key", n)
	}
}

func TestUnknownTemplate(t *testing.T) {
	e := newEnv(t)
	e.sb.refuse["nosuch"] = true
	resp, b := e.api("POST", "/sandboxes", map[string]any{"templateID": "nosuch"})
	var ae apiError
	json.Unmarshal(b, &ae)
	if resp.StatusCode != 404 || ae.Code != 404 || !strings.Contains(ae.Message, "template 'nosuch' not found") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
	// Unsupported options are refused, not ignored.
	resp, b = e.api("POST", "/sandboxes", map[string]any{"templateID": "base", "mcp": map[string]any{"x": 1}})
	if resp.StatusCode != 400 {
		t.Errorf("mcp: %d %s", resp.StatusCode, b)
	}
	for _, p := range []string{"POST /v3/templates", "GET /sandboxes/metrics", "GET /sandboxes/abc/logs", "POST /sandboxes/abc/snapshots"} {
		m, path, _ := strings.Cut(p, " ")
		resp, b = e.api(m, path, map[string]any{})
		if resp.StatusCode != 501 || !strings.Contains(string(b), `"code":501`) {
			t.Errorf("%s: %d %s", p, resp.StatusCode, b)
		}
	}
}

func TestTemplatesMapOntoSpecs(t *testing.T) {
	e := newEnv(t)
	e.create("code-interpreter-v1")
	info := must(e.sb.Sandbox(t.Context(), "sbx0001"))
	if info.Language != "python-data" {
		t.Errorf("code-interpreter-v1 made %+v, want the python-data language", info)
	}
	e.create("my-image")
	if info := must(e.sb.Sandbox(t.Context(), "sbx0002")); info.Template != "my-image" {
		t.Errorf("an unmapped template reached the service as %q", info.Template)
	}
}

func TestListGetKillTimeoutPauseResume(t *testing.T) {
	e := newEnv(t)
	a := e.create("base")
	resp, _ := e.api("POST", "/v2/sandboxes", map[string]any{"templateID": "base", "metadata": map[string]string{"sandbox_test_id": "x y"}})
	if resp.StatusCode != 201 {
		t.Fatal(resp.StatusCode)
	}
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		_, b := e.api("GET", p, nil)
		var l []map[string]any
		json.Unmarshal(b, &l)
		if len(l) != 2 || l[0]["state"] != "running" || l[0]["startedAt"] == nil || l[0]["envdAccessToken"] != nil {
			t.Errorf("GET %s: %s", p, b)
		}
	}
	// metadata filter as the SDK encodes it (each key and value, then the pairs).
	_, b := e.api("GET", "/v2/sandboxes?metadata="+urlq("sandbox_test_id="+urlq("x y")), nil)
	var l []map[string]any
	json.Unmarshal(b, &l)
	if len(l) != 1 || l[0]["sandboxID"] != "sbx0002" {
		t.Errorf("metadata filter: %s", b)
	}
	resp, b = e.api("GET", "/sandboxes/"+a.SandboxID, nil)
	var g sandboxJSON
	json.Unmarshal(b, &g)
	if resp.StatusCode != 200 || g.EnvdAccessToken != a.EnvdAccessToken || g.State != "running" {
		t.Errorf("get: %d %s", resp.StatusCode, b)
	}
	if resp, b := e.api("POST", "/sandboxes/"+a.SandboxID+"/timeout", map[string]any{"timeout": 5}); resp.StatusCode != 204 {
		t.Errorf("timeout: %d %s", resp.StatusCode, b)
	}
	info := must(e.sb.Sandbox(t.Context(), a.SandboxID))
	if d := info.EndAt.Sub(info.StartedAt).Seconds(); d > 6 {
		t.Errorf("timeout not set: %v", d)
	}
	if resp, _ := e.api("POST", "/sandboxes/"+a.SandboxID+"/refreshes", map[string]any{"duration": 30}); resp.StatusCode != 204 {
		t.Errorf("refresh: %d", resp.StatusCode)
	}
	// pause 204, again 409; resume 201, again 409; connect 200.
	for _, c := range []struct {
		path string
		want int
	}{{"/pause", 204}, {"/pause", 409}, {"/resume", 201}, {"/resume", 409}, {"/connect", 200}, {"/pause", 204}} {
		resp, b := e.api("POST", "/sandboxes/"+a.SandboxID+c.path, map[string]any{"timeout": 60})
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d %s, want %d", c.path, resp.StatusCode, b, c.want)
		}
	}
	// connect (v2, the JS SDK's) resumes a paused sandbox: 201, same token.
	resp, b = e.api("POST", "/v2/sandboxes/"+a.SandboxID+"/connect", map[string]any{"timeout": 60})
	var c sandboxJSON
	json.Unmarshal(b, &c)
	if resp.StatusCode != 201 || c.EnvdAccessToken != a.EnvdAccessToken {
		t.Errorf("connect: %d %s", resp.StatusCode, b)
	}
	if resp, _ := e.api("DELETE", "/sandboxes/"+a.SandboxID, nil); resp.StatusCode != 204 {
		t.Errorf("kill: %d", resp.StatusCode)
	}
	for _, p := range []string{"GET /sandboxes/", "DELETE /sandboxes/", "POST /sandboxes/"} {
		m, path, _ := strings.Cut(p, " ")
		if m == "POST" {
			path += a.SandboxID + "/timeout"
		} else {
			path += a.SandboxID
		}
		resp, b := e.api(m, path, map[string]any{"timeout": 1})
		var ae apiError
		json.Unmarshal(b, &ae)
		if resp.StatusCode != 404 || ae.Code != 404 {
			t.Errorf("%s after kill: %d %s", p, resp.StatusCode, b)
		}
	}
	// The killed sandbox's token opens nothing any more.
	if resp, _ := e.do("GET", "/health", nil, envdHdr(a)); resp.StatusCode != 502 {
		t.Errorf("health after kill: %d, want 502", resp.StatusCode)
	}
}

func urlq(s string) string {
	return strings.NewReplacer("%", "%25", "=", "%3D", "&", "%26", " ", "%20").Replace(s)
}

// A token opens its own sandbox only: another sandbox's token, no token,
// the traffic token (on envd) and a guessed one are all refused, on every
// data-plane route.
func TestTokens(t *testing.T) {
	e := newEnv(t)
	a, b := e.create("base"), e.create("base")
	routes := []struct{ method, path, ct string }{
		{"GET", "/health", ""}, {"GET", "/files?path=x", ""}, {"POST", "/files?path=x", "application/octet-stream"},
		{"POST", "/process.Process/List", "application/json"}, {"POST", "/filesystem.Filesystem/Stat", "application/json"},
		{"POST", "/process.Process/Start", "application/connect+json"},
	}
	for _, r := range routes {
		for name, tok := range map[string]string{"other's": b.EnvdAccessToken, "none": "", "traffic": a.TrafficAccessToken, "guess": strings.Repeat("0", 64)} {
			h := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983", "Content-Type": r.ct}
			if tok != "" {
				h["X-Access-Token"] = tok
			}
			if name == "traffic" {
				h["E2B-Traffic-Access-Token"] = tok
				delete(h, "X-Access-Token")
			}
			resp, body := e.do(r.method, r.path, "{}", h)
			if resp.StatusCode != 401 {
				t.Errorf("%s %s with %s token: %d %s", r.method, r.path, name, resp.StatusCode, body)
			}
		}
	}
	// Its own token opens it.
	if resp, _ := e.do("GET", "/health", nil, envdHdr(a)); resp.StatusCode != 204 {
		t.Errorf("health: %d", resp.StatusCode)
	}
	// An unknown sandbox is infra's 502, whatever the token.
	h := envdHdr(a)
	h["E2b-Sandbox-Id"] = "nosuch"
	if resp, b := e.do("GET", "/health", nil, h); resp.StatusCode != 502 || !strings.Contains(string(b), `"sandboxId":"nosuch"`) {
		t.Errorf("unknown sandbox: %d %s", resp.StatusCode, b)
	}
	// The code interpreter takes the traffic token (the SDK sends only it
	// on /contexts) but not another sandbox's.
	ci := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": a.TrafficAccessToken}
	if resp, b := e.do("GET", "/contexts", nil, ci); resp.StatusCode != 200 {
		t.Errorf("contexts with traffic token: %d %s", resp.StatusCode, b)
	}
	ci["E2B-Traffic-Access-Token"] = b.TrafficAccessToken
	if resp, _ := e.do("GET", "/contexts", nil, ci); resp.StatusCode != 401 {
		t.Errorf("contexts with another's traffic token: %d", resp.StatusCode)
	}
}

// JS SDKs 2.7-2.14.0 send only X-Access-Token on /files: the token names
// its sandbox.
func TestRouteByTokenAlone(t *testing.T) {
	e := newEnv(t)
	a := e.create("base")
	e.create("base")
	must(e.sb.WriteFile(t.Context(), a.SandboxID, "f.txt", []byte("hi"), ""))
	resp, b := e.do("GET", "/files?path=f.txt", nil, map[string]string{"X-Access-Token": a.EnvdAccessToken})
	if resp.StatusCode != 200 || string(b) != "hi" {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
}

// E2B's routes live at the root beside sandcell's: Owns claims none of
// sandcell's own paths.
func TestOwnsNoSandcellRoute(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/mcp", "/metrics", "/healthz", "/readyz", "/api/v2/execute", "/api/v2/runtimes", "/submissions", "/submissions/batch", "/languages", "/run_code", "/statuses", "/about", "/", "/health", "/files", "/execute"} {
		if e.h.Owns(httptest.NewRequest("GET", p, nil)) {
			t.Errorf("Owns(%s) without E2B headers", p)
		}
	}
	for _, p := range []string{"/sandboxes", "/v2/sandboxes", "/sandboxes/abc/pause", "/v2/sandboxes/abc/connect", "/v3/templates"} {
		if !e.h.Owns(httptest.NewRequest("POST", p, nil)) {
			t.Errorf("Owns(%s) = false", p)
		}
	}
	r := httptest.NewRequest("POST", "/process.Process/Start", nil)
	r.Header.Set("E2b-Sandbox-Id", "abc")
	if !e.h.Owns(r) {
		t.Error("a request with E2b-Sandbox-Id is not owned")
	}
}

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys")
	k := NewKey()
	if !keyShape.MatchString(k) {
		t.Fatalf("NewKey %q", k)
	}
	os.WriteFile(p, []byte("# operator keys\n\n"+k+"\n"), 0o600)
	keys := must(LoadKeys(p))
	if !slices.Equal(keys, []string{k}) {
		t.Errorf("%v", keys)
	}
	os.Chmod(p, 0o644)
	if _, err := LoadKeys(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key file: %v", err)
	}
	os.WriteFile(p, []byte("e2b_short\n"), 0o600)
	if _, err := LoadKeys(p); err == nil {
		t.Error("a malformed key was taken")
	}
	if _, err := New(Options{Sandboxes: newFake()}); err == nil {
		t.Error("New without keys: no error")
	}
}

var _ = api.ErrNotFound

// With a node name, every id given out starts with it and clientID is it;
// an id of another node is not found here, on either plane.
func TestNodeNamesIDs(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Node = "na" })
	s := e.create("base")
	if s.SandboxID != "nasbx0001" || s.ClientID != "na" {
		t.Fatalf("%+v", s)
	}
	if resp, b := e.api("GET", "/sandboxes/"+s.SandboxID, nil); resp.StatusCode != 200 {
		t.Errorf("get: %d %s", resp.StatusCode, b)
	}
	if resp, _ := e.do("GET", "/health", nil, envdHdr(s)); resp.StatusCode != 204 {
		t.Errorf("health: %d", resp.StatusCode)
	}
	if resp, _ := e.api("GET", "/sandboxes/nbsbx0001", nil); resp.StatusCode != 404 {
		t.Errorf("another node's id on the control plane: %d", resp.StatusCode)
	}
	h := envdHdr(s)
	h["E2b-Sandbox-Id"] = "nbsbx0001"
	if resp, b := e.do("GET", "/health", nil, h); resp.StatusCode != 502 || !strings.Contains(string(b), "nbsbx0001") {
		t.Errorf("another node's id on the data plane: %d %s", resp.StatusCode, b)
	}
	if _, err := New(Options{Sandboxes: newFake(), APIKeys: []string{testKey}, Node: "N-1"}); err == nil {
		t.Error("a node name outside [a-z][a-z0-9]* was taken")
	}
}

// E2B's network options on create map onto the sandbox's network policy:
// allowOut's names with denyOut of all traffic (or allow_internet_access
// false) are its allowlist; no option is no network; what cannot map is
// refused with E2B's error shape and nothing is created.
func TestCreateNetwork(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		body map[string]any
		want []string // the policy's allowlist; nil: no network
	}{
		{map[string]any{"network": map[string]any{"allowOut": []string{"Git.Test", "*.pypi.org", "git.test"}, "denyOut": []string{"0.0.0.0/0"}}}, []string{"*.pypi.org", "git.test"}},
		{map[string]any{"allow_internet_access": false, "network": map[string]any{"allowOut": []string{"git.test"}}}, []string{"git.test"}},
		{map[string]any{"network": map[string]any{"denyOut": []string{"0.0.0.0/0"}}}, nil},
		{map[string]any{"allow_internet_access": false}, nil},
		// E2B's default, sent on every create by the Python SDK and the
		// JS SDK up to 2.45: the template's policy (base has none).
		{map[string]any{"allow_internet_access": true}, nil},
		{map[string]any{"allow_internet_access": true, "network": map[string]any{"allowOut": []string{"git.test"}, "denyOut": []string{"0.0.0.0/0"}}}, []string{"git.test"}},
		{map[string]any{"network": map[string]any{"allowPublicTraffic": false}}, nil},
		{map[string]any{}, nil},
	} {
		c.body["templateID"] = "base"
		before := len(e.sb.specs)
		resp, b := e.api("POST", "/sandboxes", c.body)
		if resp.StatusCode != 201 || len(e.sb.specs) != before+1 {
			t.Errorf("%v: %d %s", c.body, resp.StatusCode, b)
			continue
		}
		n := e.sb.specs[before].Network
		if c.want == nil && n != nil || c.want != nil && (n == nil || !slices.Equal(n.Allow, c.want)) {
			t.Errorf("%v: policy %+v, want allow %q", c.body, n, c.want)
		}
	}
	for _, c := range []struct {
		body map[string]any
		says string
	}{
		{map[string]any{"network": map[string]any{"allowOut": []string{"git.test"}}}, "allows all traffic in E2B"},
		{map[string]any{"network": map[string]any{"allowOut": []string{"8.8.8.8"}, "denyOut": []string{"0.0.0.0/0"}}}, "by name only"},
		{map[string]any{"network": map[string]any{"allowOut": []string{"10.0.0.0/8"}, "denyOut": []string{"0.0.0.0/0"}}}, "by name only"},
		{map[string]any{"network": map[string]any{"denyOut": []string{"evil.test"}}}, "domain names are not supported for deny rules"},
		{map[string]any{"network": map[string]any{"allowPublicTraffic": true}}, "allowPublicTraffic true is not supported"},
		{map[string]any{"network": map[string]any{"egressProxy": map[string]any{"address": "p:1080"}}}, "network.egressProxy is not supported"},
		{map[string]any{"network": map[string]any{"rules": map[string]any{"a.test": []any{}}}}, "network.rules is not supported"},
		{map[string]any{"network": map[string]any{"maskRequestHost": "x"}}, "network.maskRequestHost is not supported"},
	} {
		c.body["templateID"] = "base"
		before := len(e.sb.specs)
		resp, b := e.api("POST", "/sandboxes", c.body)
		var ae apiError
		json.Unmarshal(b, &ae)
		if resp.StatusCode != 400 || ae.Code != 400 || !strings.Contains(ae.Message, c.says) || len(e.sb.specs) != before {
			t.Errorf("%v: %d %s, want 400 saying %q and no sandbox", c.body, resp.StatusCode, b, c.says)
		}
	}
}

// TestListPages: GET /v2/sandboxes hands out pages of at most limit
// sandboxes, newest first, with X-Next-Token until the last page (the SDK's
// paginator follows it); a sandbox killed between pages neither shifts nor
// repeats the rest. The v1 list has no pages.
func TestListPages(t *testing.T) {
	e := newEnv(t)
	var made []string
	for range 5 {
		made = append(made, e.create("base").SandboxID)
		time.Sleep(2 * time.Millisecond) // distinct start times: newest first is checkable
	}
	slices.Reverse(made)
	var got []string
	token := ""
	for page := 0; ; page++ {
		path := "/v2/sandboxes?limit=2"
		if token != "" {
			path += "&nextToken=" + url.QueryEscape(token)
		}
		resp, b := e.api("GET", path, nil)
		var l []sandboxJSON
		if resp.StatusCode != 200 || json.Unmarshal(b, &l) != nil || len(l) > 2 {
			t.Fatalf("page %d: %d %s", page, resp.StatusCode, b)
		}
		if tr := resp.Header.Get("X-Total-Running"); tr == "" {
			t.Errorf("page %d: no X-Total-Running", page)
		}
		for _, s := range l {
			got = append(got, s.SandboxID)
		}
		if page == 0 {
			// Killed before the next page: the pages go on where they were.
			if resp, _ := e.api("DELETE", "/sandboxes/"+made[1], nil); resp.StatusCode != 204 {
				t.Fatalf("kill: %d", resp.StatusCode)
			}
		}
		token = resp.Header.Get("X-Next-Token")
		if token == "" {
			break
		}
		if page > 5 {
			t.Fatal("pages never end")
		}
	}
	if want := append(made[:2:2], made[2:]...); !slices.Equal(got, want) {
		t.Errorf("pages gave %v, want %v (newest first, each once)", got, want)
	}
	_, b := e.api("GET", "/sandboxes", nil)
	var all []sandboxJSON
	if json.Unmarshal(b, &all); len(all) != 4 {
		t.Errorf("v1 list: %d sandboxes, want the 4 alive", len(all))
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "nextToken=garbage!", "nextToken=" + base64.RawURLEncoding.EncodeToString([]byte("12"))} {
		resp, b := e.api("GET", "/v2/sandboxes?"+q, nil)
		if resp.StatusCode != 400 || !strings.Contains(string(b), strings.SplitN(q, "=", 2)[0]) {
			t.Errorf("%s: %d %s, want 400 naming the parameter", q, resp.StatusCode, b)
		}
	}
}

// TestCreateInternetKeepsTemplatePolicy: allow_internet_access true (E2B's
// default, which SDKs send unasked) keeps the template's own policy;
// false takes it away.
func TestCreateInternetKeepsTemplatePolicy(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Templates = map[string]api.SandboxSpec{"netted": {Language: "python", Network: &api.Network{Allow: []string{"pypi.test"}}}}
	})
	for _, c := range []struct {
		internet bool
		want     []string
	}{{true, []string{"pypi.test"}}, {false, nil}} {
		before := len(e.sb.specs)
		resp, b := e.api("POST", "/sandboxes", map[string]any{"templateID": "netted", "allow_internet_access": c.internet})
		if resp.StatusCode != 201 || len(e.sb.specs) != before+1 {
			t.Fatalf("internet %v: %d %s", c.internet, resp.StatusCode, b)
		}
		n := e.sb.specs[before].Network
		if got := []string(nil); n != nil {
			got = n.Allow
			if !slices.Equal(got, c.want) {
				t.Errorf("internet %v: policy %v, want %v", c.internet, got, c.want)
			}
		} else if c.want != nil {
			t.Errorf("internet %v: no policy, want %v", c.internet, c.want)
		}
	}
}

// TestListOrderAfterTemplate: order=asc lists oldest first (and pages
// so), startedAfter keeps those started at or after it, template those
// created from it; a bad order or time is a 400 naming it.
func TestListOrderAfterTemplate(t *testing.T) {
	e := newEnv(t)
	var made []sandboxJSON
	for _, tmpl := range []string{"base", "my-image", "base"} {
		made = append(made, e.create(tmpl))
		time.Sleep(2 * time.Millisecond)
	}
	ids := func(q string) []string {
		t.Helper()
		resp, b := e.api("GET", "/v2/sandboxes?"+q, nil)
		var l []sandboxJSON
		if resp.StatusCode != 200 || json.Unmarshal(b, &l) != nil {
			t.Fatalf("%s: %d %s", q, resp.StatusCode, b)
		}
		var out []string
		for _, s := range l {
			out = append(out, s.SandboxID)
		}
		return out
	}
	if got, want := ids("order=asc"), []string{made[0].SandboxID, made[1].SandboxID, made[2].SandboxID}; !slices.Equal(got, want) {
		t.Errorf("order=asc: %v, want %v", got, want)
	}
	// Pages in ascending order go on where they were.
	resp, b := e.api("GET", "/v2/sandboxes?order=asc&limit=2", nil)
	var first []sandboxJSON
	json.Unmarshal(b, &first)
	if got := ids("order=asc&limit=2&nextToken=" + url.QueryEscape(resp.Header.Get("X-Next-Token"))); len(first) != 2 || !slices.Equal(got, []string{made[2].SandboxID}) {
		t.Errorf("order=asc pages: %v then %v", first, got)
	}
	info := must(e.sb.Sandbox(t.Context(), made[1].SandboxID))
	if got := ids("startedAfter=" + url.QueryEscape(info.StartedAt.Format(time.RFC3339Nano))); !slices.Equal(got, []string{made[2].SandboxID, made[1].SandboxID}) {
		t.Errorf("startedAfter the second's start: %v", got)
	}
	if got := ids("template=my-image"); !slices.Equal(got, []string{made[1].SandboxID}) {
		t.Errorf("template=my-image: %v", got)
	}
	if got := ids("template=unknown"); len(got) != 0 {
		t.Errorf("template=unknown: %v", got)
	}
	for _, q := range []string{"order=sideways", "startedAfter=yesterday"} {
		resp, b := e.api("GET", "/v2/sandboxes?"+q, nil)
		if resp.StatusCode != 400 || !strings.Contains(string(b), strings.SplitN(q, "=", 2)[0]) {
			t.Errorf("%s: %d %s, want 400 naming it", q, resp.StatusCode, b)
		}
	}
}

// TestConnectNeverShortens: a connect to a running sandbox extends its
// lifetime to the timeout asked when that is later, and never shortens it.
func TestConnectNeverShortens(t *testing.T) {
	e := newEnv(t)
	a := e.create("base") // 300 s
	end := func() time.Time { return must(e.sb.Sandbox(t.Context(), a.SandboxID)).EndAt }
	before := end()
	if resp, b := e.api("POST", "/v2/sandboxes/"+a.SandboxID+"/connect", map[string]any{"timeout": 60}); resp.StatusCode != 200 {
		t.Fatalf("connect: %d %s", resp.StatusCode, b)
	}
	if got := end(); !got.Equal(before) {
		t.Errorf("a connect with 60 s moved the end from %v to %v", before, got)
	}
	e.api("POST", "/v2/sandboxes/"+a.SandboxID+"/connect", map[string]any{"timeout": 3600})
	if got := end(); time.Until(got) < 3500*time.Second {
		t.Errorf("a connect with 3600 s: ends in %v", time.Until(got))
	}
}

// TestTemplatesFor: E2B's base and code-interpreter-v1 are the workbench
// (git, node, python's data stack) when it is built, else the defaults.
func TestTemplatesFor(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	got := TemplatesFor(func(l string) bool { return l == Workbench }, log)
	if got["base"].Language != Workbench || got["code-interpreter-v1"].Language != Workbench {
		t.Errorf("with the workbench built: %+v", got)
	}
	got = TemplatesFor(func(string) bool { return false }, log)
	if want := DefaultTemplates(); got["base"].Language != want["base"].Language || got["code-interpreter-v1"].Language != want["code-interpreter-v1"].Language {
		t.Errorf("without it: %+v, want %+v", got, want)
	}
}
