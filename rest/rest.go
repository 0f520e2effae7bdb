package rest

import (
	stdcmp "cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/rootfs"
)

// Executor runs requests: *executor.Executor. PhaseLimits is the one place
// where a run's limits are decided; the adapters call it to refuse limits
// the executor would refuse, before anything runs.
type Executor interface {
	Execute(ctx context.Context, req executor.Request) (api.Result, error)
	PhaseLimits(adj, req api.Limits) (limits.Set, []string, error)
}

// Language is a language of the catalogue whose layers are built: one the
// server can run now.
type Language struct {
	rootfs.Language
	// Package is the version of the language's Debian package its layer
	// was built with ("3.11.2-1+b1"); Version the same as the semantic
	// version the two APIs list ("3.11.2").
	Package, Version string
}

// Options configure the adapters. Executor and Languages are required.
type Options struct {
	Executor Executor
	// Admit admits a run (service.Gate.Enter, through
	// service.Service.Admit): every run of the adapters waits for the
	// same slots as the MCP tools' runs. Nil: no bound.
	Admit func(ctx context.Context) (release func(), err error)
	// Languages lists the languages that can run now (BuiltLanguages).
	// It is called at most once a second.
	Languages func() ([]Language, error)
	// Ceilings are the server's ceilings: a request asking for more is
	// refused in the API's words (Piston: "cannot exceed the configured
	// limit of N"; Judge0: "must be less than or equal to N").
	Ceilings limits.Set
	// Guard checks a request's Origin, Host and token before anything
	// else (mcp.HTTPHandler.Check: the rules of /mcp): 0 lets it on, else
	// the HTTP status and why. Nil lets every request on.
	Guard func(*http.Request) (status int, reason string)
	// Workers are the Judge0 submissions run at once in the background
	// (0: 1); each still waits for Admit.
	Workers int
	// MaxSubmissions, MaxSubmissionBytes and SubmissionTTL bound Judge0's
	// submissions in memory: at most that many (0: 1000) holding at most
	// that many bytes of source, input and output (0: 256 MiB), each kept
	// that long once finished (0: 1 hour); past the count or the bytes
	// the oldest finished ones go first. MaxQueue bounds those waiting to
	// run (0: 100, Judge0's MAX_QUEUE_SIZE).
	MaxSubmissions     int
	MaxSubmissionBytes int64
	SubmissionTTL      time.Duration
	MaxQueue           int
	// Judge0Callbacks is the policy of Judge0's callback_url (see
	// judge0_callback.go): the host:port pairs an operator allowlisted
	// and the names mapped to addresses. No Allow: callbacks refused.
	Judge0Callbacks egress.Config
	// NetworkAllow is the operator's ceiling of programs' network
	// (--network-allow, executor.NetworkOptions.Allow): the hosts a
	// language's programs (by canonical name, or "*" for all) may be
	// allowed. The APIs whose network option is a switch (Judge0's
	// enable_network) give a program all of its language's; nil: none.
	NetworkAllow map[string][]string
	// MaxBodyBytes caps a request body (0: 16 MiB, as /mcp's messages).
	MaxBodyBytes int64
	// Logger receives the adapters' logs (nil: discarded).
	Logger *slog.Logger

	// Sandboxes, if set, serves live sandboxes under /v1/sandboxes and
	// their ports (sandbox.go, sandbox_ports.go); nil: those routes are
	// absent. SandboxDomain is the domain of host-routed ports
	// ("<port>-<id>.<domain>"; "": "localhost"). MaxPortConns bounds the
	// proxy's connections to one sandbox at once (0: 64); PortIdle closes
	// one without a byte either way for that long (0: 5 minutes).
	Sandboxes     api.Sandboxes
	SandboxDomain string
	MaxPortConns  int
	PortIdle      time.Duration
}

// Handler serves both APIs (see the package doc). Close it when the server
// stops: it cancels the Judge0 submissions still running in the
// background.
type Handler struct {
	opts   Options
	log    *slog.Logger
	mux    *http.ServeMux
	judge0 *judge0
	ports  *ports

	langMu   sync.Mutex
	langAt   time.Time
	langList []Language
	langErr  error
}

// New makes the handler.
func New(opts Options) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 16 << 20
	}
	h := &Handler{opts: opts, log: opts.Logger, mux: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.judge0 = newJudge0(h)
	h.pistonRoutes()
	h.judge0.routes()
	h.fusionRoutes()
	if opts.Sandboxes != nil {
		h.opts.SandboxDomain = strings.ToLower(strings.Trim(stdcmp.Or(opts.SandboxDomain, "localhost"), "."))
		h.opts.MaxPortConns = stdcmp.Or(max(opts.MaxPortConns, 0), 64)
		h.opts.PortIdle = stdcmp.Or(max(opts.PortIdle, 0), 5*time.Minute)
		h.ports = newPorts(h)
		h.sandboxRoutes()
	}
	return h
}

// Close cancels the Judge0 runs in flight and waits for them.
func (h *Handler) Close() { h.judge0.close() }

// ServeHTTP guards the request (Options.Guard), then routes it. An
// unknown path gets the 404 of the API it would belong to.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if t, ok := h.hostRoute(r.Host); ok {
		h.serveHostRoute(w, r, t) // a sandbox's port by its host name: every path is the application's
		return
	}
	piston := strings.HasPrefix(r.URL.Path, "/api/v2/")
	if h.opts.Guard != nil {
		// Judge0's clients send their token as X-Auth-Token (its
		// AUTHN_HEADER); the guard knows Authorization: Bearer.
		if tok := r.Header.Get("X-Auth-Token"); tok != "" && r.Header.Get("Authorization") == "" && !piston {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		if status, reason := h.opts.Guard(r); status != 0 {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sandcell"`)
			}
			if piston {
				pistonError(w, status, reason)
			} else if isFusionPath(r.URL.Path) {
				fusionError(w, status, reason)
			} else {
				judge0Error(w, status, reason)
			}
			return
		}
	}
	// Judge0's trailing slashes are trimmed, not a proxied path's.
	if !piston && !strings.HasPrefix(r.URL.Path, sandboxPrefix+"/") {
		r = judge0Path(r)
	}
	h.mux.ServeHTTP(w, r)
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // our own types: cannot happen
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// errBodyTooLarge and errContentType are the body's refusals.
var (
	errBodyTooLarge = errors.New("request body too large")
	errContentType  = errors.New("unsupported content type")
)

// readBody reads a JSON request body, at most Options.MaxBodyBytes. The
// Content-Type may be absent, application/json or text/plain: the npm
// piston-client posts its JSON with node-fetch's default text/plain, and a
// browser's text/plain POST is a simple cross-origin request only in
// name, since Guard refuses foreign origins first.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "text/plain") {
			return nil, fmt.Errorf("%w %q: send application/json", errContentType, ct)
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, fmt.Errorf("%w: at most %d bytes", errBodyTooLarge, h.opts.MaxBodyBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	return body, nil
}

// bodyStatus is the HTTP status of a readBody error.
func bodyStatus(err error) int {
	switch {
	case errors.Is(err, errBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errContentType):
		return http.StatusUnsupportedMediaType
	}
	return http.StatusBadRequest
}

// languages is Options.Languages, asked at most once a second (each call
// reads the layer store's manifests).
func (h *Handler) languages() ([]Language, error) {
	h.langMu.Lock()
	defer h.langMu.Unlock()
	if time.Since(h.langAt) > time.Second || h.langList == nil && h.langErr == nil {
		h.langList, h.langErr = h.opts.Languages()
		h.langAt = time.Now()
	}
	return h.langList, h.langErr
}

// BuiltLanguages lists the catalogue's languages whose layers st has
// built, with their versions: Options.Languages for a server.
func BuiltLanguages(st *rootfs.Store) func() ([]Language, error) {
	return func() ([]Language, error) {
		var out []Language
		for _, l := range rootfs.Languages() {
			s, err := st.Status(l)
			if err != nil {
				return nil, err
			}
			if s.Built {
				out = append(out, Language{Language: l, Package: s.Version, Version: SemVer(s.Version)})
			}
		}
		return out, nil
	}
}

var leadingVersion = regexp.MustCompile(`^[0-9]+(\.[0-9]+){0,2}`)

// SemVer is a Debian package version as MAJOR.MINOR.PATCH, as Piston and
// Judge0 list versions: the epoch and the Debian revision dropped, missing
// parts zero ("1:3.1" is 3.1.0, "2:1.19~1" 1.19.0, "3.11.2-1+b1" 3.11.2);
// 0.0.0 when it does not start with a number.
func SemVer(debian string) string {
	if _, rest, ok := strings.Cut(debian, ":"); ok {
		debian = rest
	}
	v := leadingVersion.FindString(debian)
	if v == "" {
		return "0.0.0"
	}
	for strings.Count(v, ".") < 2 {
		v += ".0"
	}
	return v
}

// transcript records a run's output as it comes, both streams of a phase
// in one text in the order they were written (Piston's "output", Judge0's
// redirect_stderr_to_stdout). It is api.Request.Output; what it holds is
// bounded by the output cap of each stream.
type transcript struct {
	mu           sync.Mutex
	compile, run strings.Builder
}

func (t *transcript) output(stream, text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if strings.HasPrefix(stream, "compile ") {
		t.compile.WriteString(text)
	} else {
		t.run.WriteString(text)
	}
}

// phase is the interleaved text of the compile or the run phase.
func (t *transcript) phase(compile bool) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if compile {
		return t.compile.String()
	}
	return t.run.String()
}

// busyAnswer is the Retry-After header's value for a refusal of class
// api.ErrBusy, in whole seconds (at least 1).
func retryAfter(err error) string {
	var be *api.BusyError
	secs := int64(1)
	if errors.As(err, &be) {
		secs = max(1, (be.RetryAfter.Milliseconds()+999)/1000)
	}
	return fmt.Sprint(secs)
}

// networkAllow is the operator's allowlist for programs of lang (its own
// entries and every language's), nil if none.
func (h *Handler) networkAllow(lang string) []string {
	return slices.Concat(h.opts.NetworkAllow["*"], h.opts.NetworkAllow[lang])
}
