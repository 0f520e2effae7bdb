package config

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/sandcell/sandcell/internal/egress"
)

// Serve is what `sandcell serve` takes besides Config: its transports and
// their access rules. Its flags are the serve command's; a config file
// sets them by the same names.
type Serve struct {
	// Stdio serves MCP on stdin/stdout (the default when neither HTTP nor
	// TCP is given).
	Stdio bool
	// HTTP and TCP are listen addresses ("" : off); a bare ":PORT" binds
	// 127.0.0.1.
	HTTP, TCP string
	// AuthTokenFile, if set, holds the bearer token HTTP requires.
	AuthTokenFile string
	// AllowOrigins are browser Origins allowed on HTTP besides loopback
	// ones ("*": any).
	AllowOrigins []string
	// Prebuild are languages whose layers are built before the server
	// accepts calls.
	Prebuild []string
	// DrainTimeout is how long a SIGTERM/SIGINT first drains (/readyz
	// 503, new sessions refused, calls in flight finish) before the runs
	// left are cancelled; 0 cancels at once.
	DrainTimeout time.Duration
	// Judge0CallbackAllow are the host:port pairs Judge0's callback_url
	// may reach (none: callbacks refused), under the egress proxy's rules
	// (names only; --egress-host maps a name to a loopback or private
	// address).
	Judge0CallbackAllow []string
	// Tools is the MCP tool profile: "default", or "live" (the default
	// set and the live sandboxes' tools sandbox and process, issue #39:
	// about 3.4 KB more of what a model reads, so they are asked for).
	Tools string
	// SandboxDomain is the domain of the port proxy's host names
	// ("<port>-<id>.<domain>"; "" : localhost).
	SandboxDomain string
	// E2B serves E2B's APIs (control plane, envd, code interpreter) on
	// HTTP at the root beside the others (issue #43), behind the operator
	// keys of E2BKeyFile; E2BDomain, if set, is the domain the SDK's
	// getHost names (PORT-ID.E2BDomain, a wildcard DNS record's).
	// E2BNode names this instance in the sandbox ids it gives out, for a
	// proxy in front of several (docs/e2b.md "Several instances").
	E2B        bool
	E2BKeyFile string
	E2BDomain  string
	E2BNode    string
}

// AddFlags registers serve's flags on fs.
func (s *Serve) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&s.Stdio, "stdio", s.Stdio, "serve on stdin/stdout (the default when neither --http nor --tcp is given)")
	fs.StringVar(&s.HTTP, "http", s.HTTP, "serve Streamable HTTP on ADDR at /mcp, and Piston's and Judge0's REST APIs (e.g. 127.0.0.1:8080; a bare :PORT binds 127.0.0.1)")
	fs.StringVar(&s.TCP, "tcp", s.TCP, "serve newline-delimited JSON on TCP ADDR (e.g. 127.0.0.1:3000; a bare :PORT binds 127.0.0.1)")
	fs.StringVar(&s.AuthTokenFile, "auth-token-file", s.AuthTokenFile, "require 'Authorization: Bearer TOKEN' on HTTP, TOKEN read from this file")
	fs.Var(&listValue{p: &s.AllowOrigins}, "allow-origin", "browser Origin allowed on HTTP besides loopback ones (repeatable; * for any)")
	fs.DurationVar(&s.DrainTimeout, "drain-timeout", s.DrainTimeout, "on SIGTERM/SIGINT, first drain for at most this long: /readyz turns 503, new sessions are refused, requests in flight finish (0: cancel them at once)")
	fs.Var(&listValue{p: &s.Judge0CallbackAllow, check: callbackTarget}, "judge0-callback-allow", "HOST:PORT a Judge0 submission's callback_url may reach (repeatable; none: callbacks refused; names only, --egress-host maps one to a private address)")
	fs.StringVar(&s.Tools, "tools", s.Tools, "MCP tool profile: default, or live (adds the tools sandbox and process: live sandboxes with background processes and ports)")
	fs.StringVar(&s.SandboxDomain, "sandbox-domain", s.SandboxDomain, "domain of a live sandbox's port by host name on --http: PORT-ID.DOMAIN (default localhost: http://8000-ID.localhost:PORT/ works on this machine)")
	fs.BoolVar(&s.E2B, "e2b", s.E2B, "serve E2B's APIs on --http (the e2b and @e2b/code-interpreter SDKs with E2B_API_URL and E2B_SANDBOX_URL set to it), keys from --e2b-key-file")
	fs.StringVar(&s.E2BKeyFile, "e2b-key-file", s.E2BKeyFile, "E2B API keys, one a line (e2b_ and 40 hex digits; mode 600), for --e2b")
	fs.StringVar(&s.E2BDomain, "e2b-domain", s.E2BDomain, "with --e2b: the domain sandboxes' ports are named under (getHost gives PORT-ID.DOMAIN; needs wildcard DNS to this server)")
	fs.StringVar(&s.E2BNode, "e2b-node", s.E2BNode, "with --e2b: this instance's name, the prefix of every sandbox id it gives out, so that a proxy in front of several routes by it (lower-case letters and digits; one length for all)")
	fs.Var(&listValue{p: &s.Prebuild, split: true}, "prebuild", "LANG,...: build these languages' layers before accepting calls (repeatable)")
}

// Validate checks what the flag types alone do not: a negative drain.
// serve and `config check` both call it, so a file is refused where a
// flag would be.
func (s *Serve) Validate() error {
	if s.DrainTimeout < 0 {
		return fmt.Errorf("--drain-timeout %s is negative", s.DrainTimeout)
	}
	switch s.Tools {
	case "", ToolsDefault, ToolsLive:
	default:
		return fmt.Errorf("--tools %q: give %s or %s", s.Tools, ToolsDefault, ToolsLive)
	}
	if d := strings.Trim(s.SandboxDomain, "."); s.SandboxDomain != "" && (d == "" || strings.ContainsAny(d, ":/ ")) {
		return fmt.Errorf("--sandbox-domain %q: give a domain name (localhost, sandboxes.example.com)", s.SandboxDomain)
	}
	if s.E2B && (s.E2BKeyFile == "" || s.HTTP == "") {
		return fmt.Errorf("--e2b needs --http (where it is served) and --e2b-key-file (the keys that may create sandboxes)")
	}
	return nil
}

// The MCP tool profiles (--tools).
const (
	ToolsDefault = "default"
	ToolsLive    = "live"
)

// callbackTarget checks a --judge0-callback-allow entry as the egress
// proxy checks its allowlist.
func callbackTarget(hp string) error {
	_, err := egress.New(egress.Config{Allow: []string{hp}})
	return err
}

// splitList splits a comma-separated flag value.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
