package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

var update = flag.Bool("update", false, "rewrite golden files")

func goldenRequest() (*Request, Host) {
	return &Request{
			Root:   "/var/lib/sandcell/layers/python/root",
			Args:   []string{"/usr/bin/python3", "-B", "/work/main.py"},
			Env:    []string{"PYTHONDONTWRITEBYTECODE=1"},
			Files:  []api.File{{Path: "main.py", Data: []byte("print(1)\n")}},
			Limits: limits.Defaults(),
		}, Host{
			WorkDir:     "/run/sandcell/0123abcd/runs/0123abcd-1/work",
			CgroupsPath: "/sandcell/0123abcd-1",
			UIDBase:     100000,
			Seccomp:     &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Architectures: []specs.Arch{specs.ArchX86_64}},
		}
}

// TestSpecGolden pins the whole runtime-spec of a run: any change to
// namespaces, mounts, masks, limits or the process shows up in review.
// Refresh with: go test ./oci -run Golden -update
func TestSpecGolden(t *testing.T) {
	req, host := goldenRequest()
	s, err := Spec(req, host)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "config.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("spec differs from %s (run with -update and review the diff):\n%s", golden, got)
	}
}

// TestSpecInvariants checks the properties the golden file must keep, so
// that a careless -update cannot silently drop one.
func TestSpecInvariants(t *testing.T) {
	req, host := goldenRequest()
	s, err := Spec(req, host)
	if err != nil {
		t.Fatal(err)
	}
	ns := map[specs.LinuxNamespaceType]bool{}
	for _, n := range s.Linux.Namespaces {
		if n.Path != "" {
			t.Errorf("namespace %s joins an existing one (%s)", n.Type, n.Path)
		}
		ns[n.Type] = true
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.UserNamespace, specs.CgroupNamespace} {
		if !ns[want] {
			t.Errorf("namespace %s missing", want)
		}
	}
	if !s.Root.Readonly {
		t.Error("root filesystem is writable")
	}
	if !s.Process.NoNewPrivileges {
		t.Error("no_new_privs not set")
	}
	c := s.Process.Capabilities
	if c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) != 0 {
		t.Errorf("capabilities not all dropped: %+v", c)
	}
	if s.Process.User.UID == 0 || s.Linux.UIDMappings[0].HostID == 0 {
		t.Error("program runs as root or maps to host root")
	}
	if s.Linux.Seccomp == nil {
		t.Error("no seccomp filter")
	}
	for _, m := range s.Mounts {
		if m.Type == "bind" && m.Source != host.WorkDir {
			t.Errorf("host path %s is mounted", m.Source)
		}
		// A writable /proc lets a program lower its oom_score_adj
		// (issue #17).
		if m.Destination == "/proc" && !slices.Contains(m.Options, "ro") {
			t.Errorf("/proc is mounted writable: %v", m.Options)
		}
	}
	if s.Process.OOMScoreAdj == nil || *s.Process.OOMScoreAdj != 1000 {
		t.Errorf("oom_score_adj %v, want 1000", s.Process.OOMScoreAdj)
	}
	if s.Process.Terminal {
		t.Error("terminal allocated")
	}
}

func TestSpecRejects(t *testing.T) {
	base := func() (*Request, Host) { return goldenRequest() }
	for _, tc := range []struct {
		name string
		mod  func(*Request, *Host)
	}{
		{"no seccomp", func(_ *Request, h *Host) { h.Seccomp = nil }},
		{"relative work dir", func(_ *Request, h *Host) { h.WorkDir = "work" }},
		{"relative root", func(r *Request, _ *Host) { r.Root = "layers/python" }},
		{"no args", func(r *Request, _ *Host) { r.Args = nil }},
		{"NUL in arg", func(r *Request, _ *Host) { r.Args = []string{"a\x00b"} }},
		{"bad env", func(r *Request, _ *Host) { r.Env = []string{"NOEQUALS"} }},
		{"empty env key", func(r *Request, _ *Host) { r.Env = []string{"=x"} }},
		{"relative cwd", func(r *Request, _ *Host) { r.Cwd = "work" }},
		{"escaping file", func(r *Request, _ *Host) { r.Files = []api.File{{Path: "../etc/passwd"}} }},
		{"absolute file", func(r *Request, _ *Host) { r.Files = []api.File{{Path: "/etc/passwd"}} }},
		{"unclean file", func(r *Request, _ *Host) { r.Files = []api.File{{Path: "a/../../b"}} }},
		{"files too large", func(r *Request, _ *Host) {
			r.Files = []api.File{{Path: "big", Data: make([]byte, r.Limits.TmpfsBytes+1)}}
		}},
		{"invalid limits", func(r *Request, _ *Host) { r.Limits.Timeout = -time.Second }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, h := base()
			tc.mod(r, &h)
			if _, err := Spec(r, h); !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, limits.ErrInvalid) {
				t.Errorf("Spec() error = %v, want ErrInvalidRequest or limits.ErrInvalid", err)
			}
		})
	}
}
