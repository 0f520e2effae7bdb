package config

import (
	"flag"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRunscPath: --runsc wins; else the runsc `make runsc` put into a home
// (this one, then the shared ones); else PATH's ("").
func TestRunscPath(t *testing.T) {
	home, shared := t.TempDir(), t.TempDir()
	c := Config{LayerDir: home, SharedLayerDirs: []string{shared}}
	if p := c.RunscPath(); p != "" {
		t.Errorf("no built runsc: got %q, want PATH's", p)
	}
	built := filepath.Join(shared, "runsc", "runsc")
	os.MkdirAll(filepath.Dir(built), 0o755)
	os.WriteFile(built, []byte("#!/bin/sh\n"), 0o644)
	if p := c.RunscPath(); p != "" {
		t.Errorf("a runsc that is not executable was chosen: %q", p)
	}
	os.Chmod(built, 0o755)
	if p := c.RunscPath(); p != built {
		t.Errorf("got %q, want the shared home's %q", p, built)
	}
	own := filepath.Join(home, "runsc", "runsc")
	os.MkdirAll(filepath.Dir(own), 0o755)
	os.WriteFile(own, []byte("#!/bin/sh\n"), 0o755)
	if p := c.RunscPath(); p != own {
		t.Errorf("got %q, want this home's %q first", p, own)
	}
	c.Runsc = "/opt/runsc"
	if p := c.RunscPath(); p != "/opt/runsc" {
		t.Errorf("--runsc: got %q", p)
	}
}

// TestDepsFlags parses the install settings and checks the allowlist an
// install gets: the operator's (or the catalogue's) plus the index.
func TestDepsFlags(t *testing.T) {
	parse := parseDepsFlags
	c, err := parse("--deps-index", "py=http://Mirror.test:8080/simple", "--egress-host", "mirror.test=10.0.0.5", "--egress-allow", "javascript=registry.test:443", "--deps-max-size", "100MiB")
	if err != nil {
		t.Fatal(err)
	}
	if c.Deps.MaxBytes != 100<<20 || c.Deps.Hosts["mirror.test"][0].String() != "10.0.0.5" {
		t.Errorf("parsed %+v", c)
	}
	o := c.Executor(nil, nil, nil).Deps
	if o.Index["py"] != "http://Mirror.test:8080/simple" || o.MaxBytes != 100<<20 || len(o.Allow["javascript"]) != 1 || len(o.Hosts["mirror.test"]) != 1 {
		t.Errorf("executor deps options %+v, want the flags' values", o)
	}
	for _, bad := range [][]string{
		{"--deps-index", "python=ftp://x/"},
		{"--deps-index", "sh=https://x/"},
		{"--egress-allow", "python=127.0.0.1:80"},
		{"--egress-allow", "python=pypi.org"},
		{"--egress-host", "mirror.test"},
		{"--egress-host", "bad name=127.0.0.1"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestSessionBounds (issue #17): the session bounds have flags and are
// checked.
func TestSessionBounds(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--session-max-ttl", "48h", "--max-sessions", "10", "--max-sessions-per-client", "3"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil || c.SessionMaxTTL != 48*time.Hour || c.MaxSessions != 10 || c.MaxSessionsPerClient != 3 {
		t.Errorf("parsed %v %d %d, Validate %v", c.SessionMaxTTL, c.MaxSessions, c.MaxSessionsPerClient, err)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.SessionMaxTTL = c.SessionTTL - time.Second },
		func(c *Config) { c.MaxSessions = 0 },
		func(c *Config) { c.MaxSessionsPerClient = 0 },
	} {
		c := Default()
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate of %+v: no error", c)
		}
	}
}

// TestHelpPrintsNoPanic: the flag package calls String on a zero value of
// each flag's type to decide whether to print a default (flag.isZeroValue);
// the map flags (--deps-index, --egress-allow, --egress-host) panicked there
// and the help said so, once a flag.
func TestHelpPrintsNoPanic(t *testing.T) {
	for _, v := range []flag.Value{new(pairValue[string]), new(pairValue[[]string]), new(pairValue[[]netip.Addr])} {
		if s := v.String(); s != "" {
			t.Errorf("zero %T String() = %q, want \"\"", v, s)
		}
	}
	var help strings.Builder
	fs := flag.NewFlagSet("sandcell", flag.ContinueOnError)
	fs.SetOutput(&help)
	c := Default()
	c.AddFlags(fs)
	new(Serve).AddFlags(fs)
	fs.PrintDefaults()
	if strings.Contains(help.String(), "panic") {
		t.Errorf("the help mentions a panic:\n%s", help.String())
	}
	for _, name := range []string{"deps-index", "egress-allow", "egress-host"} {
		if !strings.Contains(help.String(), "-"+name) {
			t.Errorf("the help lacks -%s", name)
		}
	}
}

func TestServeToolsAndDomain(t *testing.T) {
	for _, s := range []Serve{{Tools: "all"}, {SandboxDomain: "localhost:8080"}, {SandboxDomain: "."}} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	for _, s := range []Serve{{}, {Tools: ToolsLive, SandboxDomain: "sb.example.com"}, {Tools: ToolsDefault}} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

// TestNetworkFlags: --network-allow is the ceiling of programs' network
// policies, per language (an alias given is its canonical name) or "*";
// an IP literal, a port "*" or an unknown language are refused.
func TestNetworkFlags(t *testing.T) {
	parse := parseDepsFlags
	c, err := parse("--network-allow", "py=git.test", "--network-allow", "*=*.github.com:443")
	if err != nil {
		t.Fatal(err)
	}
	o := c.Executor(nil, nil, nil).Network
	if !slices.Equal(o.Allow["python"], []string{"git.test"}) || !slices.Equal(o.Allow["*"], []string{"*.github.com:443"}) || len(o.Allow) != 2 {
		t.Errorf("executor network options %+v", o)
	}
	for _, bad := range [][]string{
		{"--network-allow", "python=127.0.0.1"},
		{"--network-allow", "python=git.test:*"},
		{"--network-allow", "nosuchlang=git.test"},
		{"--network-allow", "git.test"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// parseDepsFlags parses args as the global flags and checks the install
// and network settings.
func parseDepsFlags(args ...string) (Config, error) {
	c := Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, c.validateDeps()
}
