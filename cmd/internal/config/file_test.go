package config

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// samples are a value for every setting, as a flag argument and as the
// TOML of a config file. TestFileEqualsFlags fails for a flag missing here:
// a new setting gets its equivalence checked.
var samples = map[string]struct {
	flags []string // the flag's argument(s), one use each
	toml  string   // the value in a file
}{
	"state-dir":               {[]string{"/run/x"}, `"/run/x"`},
	"home":                    {[]string{"/var/lib/x"}, `"/var/lib/x"`},
	"no-build":                {[]string{"true"}, `true`},
	"cgroup-parent":           {[]string{"/cg"}, `"/cg"`},
	"uid-base":                {[]string{"200000"}, `200000`},
	"max-memory":              {[]string{"2GiB"}, `"2GiB"`},
	"max-pids":                {[]string{"99"}, `99`},
	"isolation":               {[]string{"gvisor"}, `"gvisor"`},
	"runsc":                   {[]string{"/opt/runsc"}, `"/opt/runsc"`},
	"runsc-platform":          {[]string{"ptrace"}, `"ptrace"`},
	"runsc-allow-kvm":         {[]string{"true"}, `true`},
	"shared-home":             {[]string{"/a", "/b"}, `["/a", "/b"]`},
	"sessions-dir":            {[]string{"/s"}, `"/s"`},
	"session-ttl":             {[]string{"2h"}, `"2h"`},
	"session-quota":           {[]string{"64MiB"}, `"64MiB"`},
	"session-max-ttl":         {[]string{"72h"}, `"72h"`},
	"max-sessions":            {[]string{"40"}, `40`},
	"max-sessions-per-client": {[]string{"5"}, `5`},
	"max-runs":                {[]string{"7"}, `7`},
	"max-queue":               {[]string{"3"}, `3`},
	"no-install":              {[]string{"true"}, `true`},
	"deps-max-size":           {[]string{"100MiB"}, `"100MiB"`},
	"deps-timeout":            {[]string{"90s"}, `"90s"`},
	"deps-index":              {[]string{"python=http://m.test/simple"}, `{python = "http://m.test/simple"}`},
	"egress-allow":            {[]string{"python=a.test:443", "python=b.test:443"}, `{python = ["a.test:443", "b.test:443"]}`},
	"egress-host":             {[]string{"m.test=10.0.0.5"}, `{"m.test" = "10.0.0.5"}`},
	"network-allow":           {[]string{"*=*.github.com:443", "*=git.test"}, `{"*" = ["*.github.com:443", "git.test"]}`},
	"pool-size":               {[]string{"4"}, `4`},
	"pool-idle":               {[]string{"5m"}, `"5m"`},
	"log-level":               {[]string{"debug"}, `"debug"`},
	"stdio":                   {[]string{"true"}, `true`},
	"http":                    {[]string{"127.0.0.1:8080"}, `"127.0.0.1:8080"`},
	"tcp":                     {[]string{":3000"}, `":3000"`},
	"auth-token-file":         {[]string{"/etc/t"}, `"/etc/t"`},
	"allow-origin":            {[]string{"https://a.test", "*"}, `["https://a.test", "*"]`},
	"prebuild":                {[]string{"sh,python"}, `["sh", "python"]`},
	"drain-timeout":           {[]string{"30s"}, `"30s"`},
	"judge0-callback-allow":   {[]string{"cb.test:443"}, `["cb.test:443"]`},
	"tools":                   {[]string{"live"}, `"live"`},
	"sandbox-domain":          {[]string{"sb.test"}, `"sb.test"`},
	"e2b":                     {[]string{"true"}, `true`},
	"e2b-key-file":            {[]string{"/etc/k"}, `"/etc/k"`},
	"e2b-domain":              {[]string{"sbx.test"}, `"sbx.test"`},
	"e2b-node":                {[]string{"n01"}, `"n01"`},
	"max-kernels":             {[]string{"3"}, `3`},
	"max-sandboxes":           {[]string{"7"}, `7`},
	"kernel-idle":             {[]string{"2m"}, `"2m"`},
	"sandbox-keep":            {[]string{"36h"}, `"36h"`},
	"fork-server":             {[]string{"false"}, `false`},
}

func flagSets() (*Config, *Serve, *flag.FlagSet, *flag.FlagSet) {
	c, s := Default(), &Serve{}
	g, sv := flag.NewFlagSet("g", flag.ContinueOnError), flag.NewFlagSet("serve", flag.ContinueOnError)
	g.SetOutput(io.Discard)
	sv.SetOutput(io.Discard)
	c.AddFlags(g)
	s.AddFlags(sv)
	return &c, s, g, sv
}

// TestFileEqualsFlags: for every setting, a config file and the same flag
// give the same effective configuration, and `config show` prints it so
// that reading the output back gives it again.
func TestFileEqualsFlags(t *testing.T) {
	_, _, g, sv := flagSets()
	var names []string
	for _, fs := range []*flag.FlagSet{g, sv} {
		fs.VisitAll(func(f *flag.Flag) {
			if !deprecated(f) {
				names = append(names, f.Name)
			}
		})
	}
	for _, name := range names {
		sm, ok := samples[name]
		if !ok {
			t.Errorf("setting %q has no sample: add one to samples", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			c1, s1, g1, sv1 := flagSets()
			fs := g1
			if sv1.Lookup(name) != nil {
				fs = sv1
			}
			for _, v := range sm.flags {
				if err := fs.Set(name, v); err != nil {
					t.Fatalf("--%s %s: %v", name, v, err)
				}
			}
			c2, s2, g2, sv2 := flagSets()
			f, err := parseFile("test.toml", []byte("# a comment\n"+name+" = "+sm.toml+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Apply([]*flag.FlagSet{g2, sv2}, []*flag.FlagSet{g2, sv2}, nil); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c1, c2) || !reflect.DeepEqual(s1, s2) {
				t.Errorf("%s: flags give %+v %+v\nfile gives %+v %+v", name, *c1, *s1, *c2, *s2)
			}
			if reflect.DeepEqual(*c1, Default()) && reflect.DeepEqual(*s1, Serve{}) {
				t.Errorf("%s: the sample changes nothing; pick one that differs from the default", name)
			}
			// show, read back: the same again.
			var out bytes.Buffer
			if err := Show(&out, g1, sv1); err != nil {
				t.Fatal(err)
			}
			back, err := parseFile("shown.toml", out.Bytes())
			if err != nil {
				t.Fatalf("config show's output does not parse: %v\n%s", err, out.String())
			}
			c3, s3, g3, sv3 := flagSets()
			if err := back.Apply([]*flag.FlagSet{g3, sv3}, []*flag.FlagSet{g3, sv3}, nil); err != nil {
				t.Fatalf("config show's output does not apply: %v\n%s", err, out.String())
			}
			if !reflect.DeepEqual(c1, c3) || !reflect.DeepEqual(s1, s3) {
				t.Errorf("%s: show then read back gives %+v %+v, want %+v %+v\n%s", name, *c3, *s3, *c1, *s1, out.String())
			}
		})
	}
}

// TestFileErrors: bad files fail with the line and the reason.
func TestFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		line       int
		want       string
	}{
		{"syntax", "max-runs = 4\nstate-dir = \n", 2, ""},
		{"unknown key", "max-runs = 4\n\nmax-runz = 5\n", 3, "max-runz: not a setting"},
		{"bad value", "pool-size = 4\nmax-memory = \"lots\"\n", 2, "max-memory"},
		{"bad table value", "[deps-index]\npython = \"ftp://x/\"\n", 1, "deps-index"},
		{"wrong type", "http = 2026-01-01\n", 1, "http"},
		{"not absolute", "shared-home = [\"relative\"]\n", 1, "not an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, g, sv := flagSets()
			f, err := parseFile("bad.toml", []byte(tc.data))
			if err == nil {
				err = f.Apply([]*flag.FlagSet{g, sv}, []*flag.FlagSet{g, sv}, nil)
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != tc.line || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "bad.toml:") {
				t.Errorf("%q: %v, want a LineError at line %d containing %q", tc.data, err, tc.line, tc.want)
			}
		})
	}
}

// TestFlagsWin: a flag given on the command line wins over the file.
func TestFlagsWin(t *testing.T) {
	c, _, g, sv := flagSets()
	if err := g.Parse([]string{"--max-runs", "9"}); err != nil {
		t.Fatal(err)
	}
	f, err := parseFile("f.toml", []byte("max-runs = 2\npool-size = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	g.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := f.Apply([]*flag.FlagSet{g}, []*flag.FlagSet{g, sv}, func(n string) bool { return set[n] }); err != nil {
		t.Fatal(err)
	}
	if c.MaxRuns != 9 || c.PoolSize != 3 {
		t.Errorf("max-runs %d pool-size %d: want 9 (the flag) and 3 (the file)", c.MaxRuns, c.PoolSize)
	}
}

func TestReadFileLimits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.toml")
	os.WriteFile(p, bytes.Repeat([]byte("# x\n"), maxFileBytes/4+1), 0o644)
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over the cap: %v", err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "none.toml")); err == nil {
		t.Error("a missing file read fine")
	}
	_ = slices.Contains[[]string]
}
