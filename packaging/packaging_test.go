// Package packaging holds the files of sandcell's Debian package and
// `make install` (systemd unit, tmpfiles entry, AppArmor profile, example
// config) and the test that builds the package, checks it with lintian and
// systemd-analyze, installs it into a scratch root and runs the installed
// binary.
package packaging

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/testutil"
)

func run(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestDebianPackage: on this machine, as a new user would: build the
// package, lint it, install it into a scratch root, and use what was
// installed.
func TestDebianPackage(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"dpkg-deb", "lintian", "systemd-analyze", "make"} {
		_, err := exec.LookPath(tool)
		testutil.Require(t, err == nil, "%s not installed (make deps installs it)", tool)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	release, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(release))
	if out, err := run(t, repo, nil, "make", "--no-print-directory", "deb"); err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	deb := filepath.Join(repo, "build", "sandcell_"+version+"_amd64.deb")

	// lintian: no errors and no warnings (overrides say why, in the package).
	if out, err := run(t, repo, nil, "lintian", "--fail-on", "error,warning", deb); err != nil {
		t.Errorf("lintian: %v\n%s", err, out)
	}
	info, err := run(t, repo, nil, "dpkg-deb", "--field", deb, "Package", "Version", "Architecture")
	if err != nil || !strings.Contains(info, "Version: "+version) || !strings.Contains(info, "Package: sandcell") {
		t.Errorf("control fields: %v\n%s", err, info)
	}

	root := t.TempDir()
	if out, err := run(t, repo, nil, "dpkg", "-x", deb, root); err != nil {
		t.Fatalf("dpkg -x: %v\n%s", err, out)
	}
	bin := filepath.Join(root, "usr/bin/sandcell")
	for _, f := range []string{"usr/bin/sandcell", "lib/systemd/system/sandcell.service", "usr/lib/tmpfiles.d/sandcell.conf",
		"etc/apparmor.d/sandcell", "etc/sandcell/sandcell.toml", "usr/share/man/man1/sandcell.1.gz",
		"usr/share/bash-completion/completions/sandcell", "usr/share/zsh/vendor-completions/_sandcell", "usr/share/doc/sandcell/copyright"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("the package lacks %s: %v", f, err)
		}
	}
	if out, err := run(t, root, nil, bin, "--version"); err != nil || !strings.HasPrefix(out, "sandcell "+version+" (commit ") {
		t.Errorf("installed sandcell --version: %v %q, want the release %s and its commit", err, out, version)
	}
	// The shipped config is valid; the unit's ExecStart and the AppArmor
	// profile name the installed binary.
	conf := filepath.Join(root, "etc/sandcell/sandcell.toml")
	if out, err := run(t, root, nil, bin, "config", "check", conf); err != nil {
		t.Errorf("config check of the shipped config: %v\n%s", err, out)
	}
	unit, _ := os.ReadFile(filepath.Join(root, "lib/systemd/system/sandcell.service"))
	prof, _ := os.ReadFile(filepath.Join(root, "etc/apparmor.d/sandcell"))
	if !bytes.Contains(unit, []byte("ExecStart=/usr/bin/sandcell --config /etc/sandcell/sandcell.toml serve")) ||
		!bytes.Contains(unit, []byte("Delegate=yes")) || !bytes.Contains(prof, []byte("profile sandcell /{usr/,usr/local/,opt/sandcell/}bin/sandcell")) {
		t.Errorf("unit or profile does not name the installed binary:\n%s\n%s", unit, prof)
	}
	// systemd-analyze verify: the unit as shipped, with ExecStart pointing
	// into the scratch root (the binary is not installed on this host).
	scratchUnit := filepath.Join(t.TempDir(), "sandcell.service")
	os.WriteFile(scratchUnit, bytes.ReplaceAll(unit, []byte("/usr/bin/sandcell"), []byte(bin)), 0o644)
	if out, err := run(t, root, []string{"MANPATH=" + filepath.Join(root, "usr/share/man")}, "systemd-analyze", "verify", scratchUnit); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if out, err := run(t, root, nil, "bash", "-n", filepath.Join(root, "usr/share/bash-completion/completions/sandcell")); err != nil {
		t.Errorf("bash completion does not parse: %v\n%s", err, out)
	}

	// The installed binary: doctor (its JSON is stable: README documents
	// it) and a program in a sandbox, with the host's layer store.
	state, cg := testutil.StateDir(t, "sandcell-pkg-test-")
	home := os.Getenv("SANDCELL_LAYER_DIR")
	if home == "" {
		home = "/var/lib/sandcell"
	}
	global := []string{"--home", home, "--state-dir", state, "--cgroup-parent", cg, "--no-build"}
	out, _ := run(t, root, nil, bin, append(global, "doctor", "--json")...)
	var rep struct {
		OK     *bool `json:"ok"`
		Checks []struct {
			Name     *string `json:"name"`
			OK       *bool   `json:"ok"`
			Required *bool   `json:"required"`
			Detail   *string `json:"detail"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.OK == nil || len(rep.Checks) == 0 {
		t.Errorf("installed doctor --json: %v\n%s", err, out)
	}
	for _, c := range rep.Checks {
		if c.Name == nil || c.OK == nil || c.Required == nil || c.Detail == nil {
			t.Errorf("a doctor check lacks name/ok/required/detail: %+v", c)
		}
	}
	out, err = run(t, root, nil, bin, append(global, "run", "--lang", "sh", "--code", "echo hello from the package; id -u")...)
	if err != nil || out != "hello from the package\n1000\n" {
		t.Errorf("installed sandcell run: %v %q", err, out)
	}
}
