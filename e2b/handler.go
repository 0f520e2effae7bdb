package e2b

import (
	"bufio"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
)

// The ports the SDKs name in E2b-Sandbox-Port.
const (
	EnvdPort        = 49983 // envd: process, filesystem, /files
	InterpreterPort = 49999 // the code interpreter: /execute, /contexts
)

// EnvdVersion is the envd version the control plane reports. The SDKs turn
// features on by it (npm e2b 2.51.0 dist/index.mjs: ENVD_ENVD_CLOSE 0.5.2,
// ENVD_OCTET_STREAM_UPLOAD 0.5.7; file metadata needs 0.6.2 and watch
// entries 0.6.3): 0.5.7 asks for what this package serves (default user,
// stdin, CloseStdin, octet-stream upload) and makes the SDK itself refuse
// file metadata (extended attributes), which it does not.
const EnvdVersion = "0.5.7"

// Options configure a Handler.
type Options struct {
	// Sandboxes is the service that holds live sandboxes.
	Sandboxes api.Sandboxes
	// Kernels runs the code interpreter's cells; nil: /execute and
	// /contexts answer 501.
	Kernels Kernels
	// APIKeys are the operator's keys (LoadKeys); a control-plane call
	// must carry one in X-API-Key or as a bearer token. At least one.
	APIKeys []string
	// Templates maps E2B template names onto sandbox specs; nil:
	// DefaultTemplates. A name it lacks is passed to the service as
	// api.SandboxSpec.Template (a language or an imported image), and a
	// refusal of it is E2B's 404 "template not found".
	Templates map[string]api.SandboxSpec
	// Domain, when set, is returned as the sandbox's domain: the SDK's
	// getHost(port) then names PORT-ID.Domain, which a wildcard DNS
	// record sends here. "": the SDK keeps its own (E2B_DOMAIN).
	Domain string
	// PublicPorts lets requests to a sandbox's own ports (getHost) in
	// without a token; by default they need the sandbox's traffic or
	// access token (E2B-Traffic-Access-Token or X-Access-Token).
	PublicPorts bool
	// Node, when set, names this instance in every sandbox id it gives
	// out (NODE + the service's id), so that a stock proxy in front of
	// several instances routes by the id's prefix (the E2b-Sandbox-Id
	// header, the /sandboxes/ID path, the PORT-ID host) with no code of
	// ours: docs/e2b.md "Several instances". Lower-case letters and
	// digits, starting with a letter; the names of one cluster must not
	// be prefixes of each other (give them one length).
	Node string
	// MaxFileBytes bounds one /files download or upload (0: 100 MiB).
	MaxFileBytes int64
	Logger       *slog.Logger
}

// DefaultTemplates are the E2B templates the SDKs and their tests name:
// base (E2B's is python 3 + node + git; here the server's default root,
// whose tools are the operator's choice) and code-interpreter-v1 (the
// code interpreter SDK's default template: E2B's has numpy, pandas and
// matplotlib, so here the python-data root, python 3 with numpy, pandas,
// matplotlib, scipy and pillow, whose python kernels the code interpreter
// runs inside the live sandbox; it has no node: a javascript context
// needs the javascript template).
func DefaultTemplates() map[string]api.SandboxSpec {
	return map[string]api.SandboxSpec{
		"base":                {},
		"code-interpreter-v1": {Language: "python-data"},
	}
}

// Workbench is the language E2B's templates map to when it is built:
// bash with git, node, curl and python with numpy, pandas and matplotlib,
// what E2B's base and code-interpreter-v1 hold.
const Workbench = "workbench"

// TemplatesFor maps base and code-interpreter-v1 to the Workbench language
// when built says its layers are built (E2B users run python3, node and
// git in a sandbox of either, and the code interpreter's javascript
// context needs node beside python's data stack); else it is
// DefaultTemplates, and log says how to get the workbench.
func TemplatesFor(built func(lang string) bool, log *slog.Logger) map[string]api.SandboxSpec {
	t := DefaultTemplates()
	if !built(Workbench) {
		log.Info("E2B's templates base and code-interpreter-v1 lack git and node here: build them with `sandcell rootfs build workbench`",
			"base", cmp.Or(t["base"].Language, "the default root"), "code-interpreter-v1", t["code-interpreter-v1"].Language)
		return t
	}
	t["base"] = api.SandboxSpec{Language: Workbench}
	t["code-interpreter-v1"] = api.SandboxSpec{Language: Workbench}
	return t
}

// Handler serves E2B's control plane, envd, the code interpreter and the
// sandboxes' ports.
type Handler struct {
	opt    Options
	sb     api.Sandboxes
	log    *slog.Logger
	keys   [][sha256.Size]byte
	tokens tokens
	mux    *http.ServeMux

	wmu      sync.Mutex
	watchers map[string]*watcher

	cmu      sync.Mutex
	defaults map[string]map[string]string // sandbox -> language -> context id
}

// New makes a Handler.
func New(opt Options) (*Handler, error) {
	if opt.Sandboxes == nil {
		return nil, errors.New("e2b: no api.Sandboxes given")
	}
	if len(opt.APIKeys) == 0 {
		return nil, errors.New("e2b: no API key: the control plane creates sandboxes and must not be open (give a key file)")
	}
	if opt.Node != "" && !nodeShape.MatchString(opt.Node) {
		return nil, fmt.Errorf("e2b: node name %q: want a lower-case letter, then up to 15 letters or digits", opt.Node)
	}
	if opt.Templates == nil {
		opt.Templates = DefaultTemplates()
	}
	if opt.MaxFileBytes <= 0 {
		opt.MaxFileBytes = 100 << 20
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	h := &Handler{opt: opt, sb: opt.Sandboxes, log: opt.Logger, watchers: map[string]*watcher{}, defaults: map[string]map[string]string{}}
	h.tokens.init()
	for _, k := range opt.APIKeys {
		if !keyShape.MatchString(k) {
			return nil, fmt.Errorf("e2b: API key %q...: want e2b_ and 40 lower-case hex digits", k[:min(len(k), 8)])
		}
		h.keys = append(h.keys, sha256.Sum256([]byte(k)))
	}
	h.mux = http.NewServeMux()
	h.controlRoutes(h.mux)
	return h, nil
}

var nodeShape = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)

// external is the id E2B's clients see for the service's sandbox id.
func (h *Handler) external(id string) string { return h.opt.Node + id }

// internal is the service's id for an id clients give, "" for one that
// names another node (or no sandbox of this one).
func (h *Handler) internal(ext string) string {
	id, ok := strings.CutPrefix(ext, h.opt.Node)
	if !ok || id == "" {
		return ""
	}
	return id
}

// keyShape is an operator key: E2B's own shape (e2b_ + 40 hex), which
// 2026-05..2026-11 SDKs check on the client before sending it.
var keyShape = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

// LoadKeys reads an API key file: one key a line (e2b_ + 40 hex digits),
// blank lines and lines starting with # ignored. The file must not be
// readable by others (a key creates sandboxes).
func LoadKeys(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("e2b key file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("e2b key file %s: mode %v is readable by group or others: chmod 600 it", path, st.Mode().Perm())
	}
	var keys []string
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !keyShape.MatchString(line) {
			return nil, fmt.Errorf("e2b key file %s:%d: not a key (want e2b_ and 40 lower-case hex digits)", path, n)
		}
		keys = append(keys, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("e2b key file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("e2b key file %s holds no key", path)
	}
	return keys, nil
}

// NewKey makes an operator key.
func NewKey() string { return "e2b_" + randomHex(20) }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b)
}

// apiKeyOK checks a control-plane request's key (X-API-Key, or
// Authorization: Bearer as cube-bench sends it), comparing digests in
// constant time so the response time says nothing of how much of a guess
// was right.
func (h *Handler) apiKeyOK(r *http.Request) bool {
	k := r.Header.Get("X-API-Key")
	if k == "" {
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			k = strings.TrimSpace(b)
		}
	}
	if k == "" {
		return false
	}
	d := sha256.Sum256([]byte(k))
	ok := 0
	for i := range h.keys {
		ok |= subtle.ConstantTimeCompare(d[:], h.keys[i][:])
	}
	return ok == 1
}

// tokens are the sandboxes' access tokens. envd opens a sandbox's envd,
// code interpreter and ports; traffic (E2B's trafficAccessToken, which the
// code interpreter SDK sends on /contexts, where it sends no access token)
// opens only the code interpreter and the ports. They live in memory: after
// a restart, connect gives a sandbox new ones.
type tokens struct {
	mu     sync.Mutex
	bySB   map[string]sbTokens
	byEnvd map[[sha256.Size]byte]string // digest of an envd token -> sandbox
}

// sbTokens are one sandbox's tokens (as given out, for get and connect, and
// as digests, for the comparisons) and the E2B template it was made from.
type sbTokens struct {
	envdText, trafficText string
	envd, traffic         [sha256.Size]byte
	template              string
}

func (t *tokens) init() {
	t.bySB = map[string]sbTokens{}
	t.byEnvd = map[[sha256.Size]byte]string{}
}

// issue gives sandbox id, made from template, tokens: those it has, or
// new ones.
func (t *tokens) issue(id, template string) sbTokens {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.bySB[id]; ok {
		return st
	}
	envd, traffic := randomHex(32), randomHex(32)
	st := sbTokens{envdText: envd, trafficText: traffic, envd: sha256.Sum256([]byte(envd)), traffic: sha256.Sum256([]byte(traffic)), template: template}
	t.bySB[id] = st
	t.byEnvd[st.envd] = id
	return st
}

func (t *tokens) get(id string) (sbTokens, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.bySB[id]
	return st, ok
}

func (t *tokens) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.bySB[id]; ok {
		delete(t.byEnvd, old.envd)
		delete(t.bySB, id)
	}
}

func (t *tokens) known(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.bySB[id]
	return ok
}

// sandboxOf is the sandbox whose envd token tok is ("" if none): JS SDKs
// 2.7-2.14.0 send only X-Access-Token on /files and /health (E2B#1158).
func (t *tokens) sandboxOf(tok string) string {
	if tok == "" {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byEnvd[sha256.Sum256([]byte(tok))]
}

// signer is the sandbox one of whose envd tokens satisfies ok ("" if none).
func (t *tokens) signer(ok func(token string) bool) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, st := range t.bySB {
		if ok(st.envdText) {
			return id
		}
	}
	return ""
}

// grant says what a request's tokens open in sandbox id.
type grant int

const (
	grantNone    grant = iota
	grantTraffic       // the code interpreter and the sandbox's ports
	grantEnvd          // everything of that sandbox
)

// check compares the request's tokens with sandbox id's own, in constant
// time, and never with another sandbox's: a token opens only the sandbox
// it was issued for.
func (t *tokens) check(id string, r *http.Request) grant {
	t.mu.Lock()
	st, ok := t.bySB[id]
	t.mu.Unlock()
	if !ok {
		return grantNone
	}
	if a := r.Header.Get("X-Access-Token"); a != "" {
		d := sha256.Sum256([]byte(a))
		if subtle.ConstantTimeCompare(d[:], st.envd[:]) == 1 {
			return grantEnvd
		}
	}
	if a := r.Header.Get("E2B-Traffic-Access-Token"); a != "" {
		d := sha256.Sum256([]byte(a))
		if subtle.ConstantTimeCompare(d[:], st.traffic[:]) == 1 {
			return grantTraffic
		}
	}
	return grantNone
}

// target is the sandbox and port a data-plane request is for: id the
// service's, ext the one the client gave (when it gave one).
type target struct {
	id   string
	port int
	ext  string
}

// sandboxIDShape is infra's sandbox id alphabet (infra
// packages/shared/pkg/id/id.go): a hyphen would break PORT-ID hosts.
var sandboxIDShape = regexp.MustCompile(`^[a-z0-9]+$`)

// route finds a data-plane request's sandbox: by the E2b-Sandbox-Id and
// E2b-Sandbox-Port headers (E2B_SANDBOX_URL), else by a Host PORT-ID.DOMAIN
// of a sandbox this handler issued tokens for (getHost), else by an envd
// access token (old JS SDKs' /files and /health). ok is false for a
// control-plane request.
func (h *Handler) route(r *http.Request) (target, bool) {
	if ext := r.Header.Get("E2b-Sandbox-Id"); ext != "" {
		port := EnvdPort
		if p := r.Header.Get("E2b-Sandbox-Port"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n <= 0 || n > 65535 {
				n = -1
			}
			port = n
		}
		return target{h.internal(ext), port, ext}, true
	}
	if t, ok := h.hostTarget(r.Host); ok {
		return t, true
	}
	if id := h.tokens.sandboxOf(r.Header.Get("X-Access-Token")); id != "" {
		return target{id, EnvdPort, ""}, true
	}
	if r.URL.Path == "/files" && r.URL.Query().Has("signature") {
		// A signed URL (uploadUrl, downloadUrl) comes with no header: the
		// sandbox whose token signed it is the one ("" if none did).
		return target{h.tokens.signer(func(token string) bool { signed, _ := signatureCheck(r, token); return signed }), EnvdPort, ""}, true
	}
	return target{}, false
}

// signatureOK checks a /files request's signature against an envd token:
// E2B's v1_ + base64(sha256("path:operation:user:token[:expiration]")),
// padding stripped (npm e2b 2.51.0 getSignature; infra envd
// internal/api/auth.go), operation read for GET and write for POST, in
// constant time; an expired one never passes. It binds the path, the
// operation and the user, so a URL opens that one file that one way.
func signatureOK(r *http.Request, token string) bool {
	signed, expired := signatureCheck(r, token)
	return signed && !expired
}

// signatureCheck says whether token signed r's URL, and whether that
// signature's expiration has passed (envd answers the two apart: "signature
// is already expired").
func signatureCheck(r *http.Request, token string) (signed, expired bool) {
	q := r.URL.Query()
	op := map[string]string{http.MethodGet: "read", http.MethodPost: "write"}[r.Method]
	sig, ok := strings.CutPrefix(q.Get("signature"), "v1_")
	if op == "" || !ok {
		return false, false
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + token
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return false, false
		}
		expired = time.Now().Unix() > n
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := base64.RawStdEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1, expired
}

// hostTarget parses PORT-ID.DOMAIN (infra's host rule), for a sandbox
// with tokens and, when Options.Domain is set, that domain only.
func (h *Handler) hostTarget(host string) (target, bool) {
	host = strings.ToLower(host)
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	label, domain, ok := strings.Cut(host, ".")
	if !ok {
		return target{}, false
	}
	if h.opt.Domain != "" && domain != strings.ToLower(h.opt.Domain) {
		return target{}, false
	}
	p, ext, ok := strings.Cut(label, "-")
	id := h.internal(ext)
	if !ok || !sandboxIDShape.MatchString(id) {
		return target{}, false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 || !h.tokens.known(id) {
		return target{}, false
	}
	return target{id, port, ext}, true
}

// controlPrefixes are the control plane's paths. None of them collides with
// sandcell's own routes (/mcp, /metrics, /healthz, /readyz, Piston's
// /api/v2, Judge0's /submissions and friends, SandboxFusion's /run_code).
var controlPrefixes = []string{"/sandboxes", "/v2/sandboxes", "/templates", "/v2/templates", "/v3/templates", "/snapshots", "/volumes"}

// Owns says whether r is E2B's: a data-plane request (by header, host or
// token) or a control-plane path. The binary sends what it owns here and
// the rest to its own routes.
func (h *Handler) Owns(r *http.Request) bool {
	if _, ok := h.route(r); ok {
		return true
	}
	for _, p := range controlPrefixes {
		if r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/") {
			return true
		}
	}
	return false
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, ok := h.route(r)
	if !ok {
		if !h.apiKeyOK(r) {
			writeError(w, http.StatusUnauthorized, "invalid API key: send an operator key in X-API-Key (or Authorization: Bearer)")
			return
		}
		h.mux.ServeHTTP(w, r)
		return
	}
	if t.id == "" && t.ext != "" {
		sandboxGone(w, t.ext, "sandbox not found on this node")
		return
	}
	if t.id == "" {
		writeError(w, http.StatusUnauthorized, "invalid or expired signature")
		return
	}
	if !sandboxIDShape.MatchString(t.id) || t.port < 0 {
		sandboxGone(w, t.ext, "bad sandbox id or port")
		return
	}
	if !h.tokens.known(t.id) {
		sandboxGone(w, h.external(t.id), "sandbox not found")
		return
	}
	g := h.tokens.check(t.id, r)
	if g == grantNone && t.port == EnvdPort && r.URL.Path == "/files" {
		// A signed URL opens /files (only: the path is checked here) of
		// the sandbox whose token signed it.
		if st, ok := h.tokens.get(t.id); ok {
			switch signed, expired := signatureCheck(r, st.envdText); {
			case signed && expired:
				writeError(w, http.StatusUnauthorized, "signature is already expired")
				return
			case signed:
				g = grantEnvd
			}
		}
	}
	if g != grantNone {
		// A sandbox that ended on its own (its lifetime) still has tokens
		// here: answer as for any sandbox that is gone, and forget them.
		info, err := h.lookup(r.Context(), t.id)
		if errors.Is(err, api.ErrNotFound) {
			sandboxGone(w, h.external(t.id), "sandbox not found")
			return
		}
		if err == nil && info.State == api.SandboxPaused && t.port == EnvdPort && r.URL.Path == "/health" {
			// isRunning of a paused sandbox is false (E2B's test "connect
			// to a paused sandbox"); any other call resumes it, as every
			// api.Sandboxes call that names a sandbox does.
			sandboxGone(w, h.external(t.id), "sandbox paused")
			return
		}
	}
	switch {
	case t.port == EnvdPort:
		if g != grantEnvd {
			writeError(w, http.StatusUnauthorized, "invalid or missing X-Access-Token for this sandbox")
			return
		}
		h.envd(w, r, t.id)
	case t.port == InterpreterPort:
		if g == grantNone {
			writeError(w, http.StatusUnauthorized, "invalid or missing access token for this sandbox")
			return
		}
		h.interpreter(w, r, t.id)
	default:
		if g == grantNone && !h.opt.PublicPorts {
			writeError(w, http.StatusUnauthorized, "this sandbox's ports need its access token (E2B-Traffic-Access-Token or X-Access-Token)")
			return
		}
		h.proxyPort(w, r, t)
	}
}

// apiError is E2B's error body (infra spec/openapi.yml Error).
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// sandboxGone is infra's proxy answer for an unknown sandbox: 502 with the
// sandbox id (the SDKs read a 502 as "the sandbox is not running").
func sandboxGone(w http.ResponseWriter, id, msg string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": msg, "code": http.StatusBadGateway})
}
