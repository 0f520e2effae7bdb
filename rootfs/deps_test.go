package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestInstallersInCatalogue(t *testing.T) {
	for _, lang := range []string{"python", "py", "javascript", "node", "python-pip"} {
		inst, err := InstallerFor(lang)
		if err != nil {
			t.Errorf("InstallerFor(%q): %v", lang, err)
			continue
		}
		l := inst.Layer()
		if l.Extends != inst.Language || l.Name != inst.Name || len(l.Packages) == 0 {
			t.Errorf("%s layer: %+v", inst.Name, l)
		}
		if _, err := chain(l); err != nil {
			t.Errorf("%s layer chain: %v", inst.Name, err)
		}
	}
	if _, err := InstallerFor("sh"); !errors.Is(err, ErrNoInstaller) {
		t.Errorf("InstallerFor(sh) = %v, want ErrNoInstaller", err)
	}
	for _, l := range Languages() {
		if strings.HasSuffix(l.Name, "-pip") || strings.HasSuffix(l.Name, "-npm") {
			t.Errorf("installer layer %s is listed as a language", l.Name)
		}
	}
}

func TestParseCatalogueRejectsBadInstallers(t *testing.T) {
	base := `{"suite":"bookworm","trim":[],"base":{"packages":["libc6"],"setup":[]},"languages":[` +
		`{"name":"python","aliases":[],"packages":["python3"],"source":"main.py","run":["/usr/bin/python3"],"version":["/usr/bin/python3"],"env":[],"setup":[]}],` +
		`"installers":[%s]}`
	good := `{"name":"python-pip","language":"python","packages":["python3-pip"],"install":["/usr/bin/python3"],"index":"https://pypi.org/simple","allow":["pypi.org:443"],"names":"pep503","run_env":["PYTHONPATH=/tmp/deps"]}`
	if _, err := parseCatalogue([]byte(strings.Replace(base, "%s", good, 1))); err != nil {
		t.Fatalf("good installer refused: %v", err)
	}
	for _, bad := range []struct{ from, to string }{
		{`"name":"python-pip"`, `"name":"python"`},
		{`"language":"python"`, `"language":"cobol"`},
		{`"install":["/usr/bin/python3"]`, `"install":["python3"]`},
		{`"index":"https://pypi.org/simple"`, `"index":"ftp://pypi.org/"`},
		{`"names":"pep503"`, `"names":"any"`},
		{`"run_env":["PYTHONPATH=/tmp/deps"]`, `"run_env":["PYTHONPATH"]`},
	} {
		inst := strings.Replace(good, bad.from, bad.to, 1)
		if _, err := parseCatalogue([]byte(strings.Replace(base, "%s", inst, 1))); err == nil {
			t.Errorf("installer with %s accepted", bad.to)
		}
	}
}

func TestNormaliseRequirements(t *testing.T) {
	pip, _ := InstallerFor("python")
	npm, _ := InstallerFor("javascript")
	for _, tc := range []struct {
		inst Installer
		in   []string
		want []string // nil: refused
	}{
		{pip, []string{"Requests==2.31.0", "numpy"}, []string{"numpy", "requests==2.31.0"}},
		{pip, []string{"zope.interface >= 5, <7", "Foo_Bar[Extra_B,extra-a]"}, []string{"foo-bar[extra-a,extra-b]", "zope-interface>=5,<7"}},
		{pip, []string{"numpy", "NumPy"}, []string{"numpy"}},
		{pip, []string{"numpy==1.0", "numpy==2.0"}, nil},
		{pip, []string{"--index-url=http://evil/"}, nil},
		{pip, []string{"-r/etc/passwd"}, nil},
		{pip, []string{"https://evil.test/x.whl"}, nil},
		{pip, []string{"./local"}, nil},
		{pip, []string{"pkg @ https://evil.test/x"}, nil},
		{pip, []string{""}, nil},
		{pip, nil, nil},
		{npm, []string{"lodash@4.17.21", "@types/node@^20", "Express"}, []string{"@types/node@^20", "Express", "lodash@4.17.21"}},
		{npm, []string{"git+https://evil.test/x.git"}, nil},
		{npm, []string{"../../etc"}, nil},
		{npm, []string{"evil@file:../x"}, nil},
		{npm, []string{"--script-shell=/bin/sh"}, nil},
		{npm, []string{"x@http://evil/"}, nil},
	} {
		got, err := tc.inst.NormaliseRequirements(tc.in)
		if tc.want == nil {
			if err == nil || !errors.Is(err, ErrInvalidRequirement) {
				t.Errorf("%s: NormaliseRequirements(%q) = %q, %v; want ErrInvalidRequirement", tc.inst.Name, tc.in, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: NormaliseRequirements(%q) = %q, %v; want %q", tc.inst.Name, tc.in, got, err, tc.want)
		}
		for _, r := range got {
			if n := tc.inst.RequirementName(r); n == "" || strings.ContainsAny(n, "=<>@[") && !strings.HasPrefix(n, "@") {
				t.Errorf("RequirementName(%q) = %q", r, n)
			}
		}
	}
}

func TestDepKeyAndArgv(t *testing.T) {
	pip, _ := InstallerFor("python")
	a := DepKey("sha256:aa", pip, "https://pypi.org/simple", []string{"numpy"})
	for _, other := range []string{
		DepKey("sha256:bb", pip, "https://pypi.org/simple", []string{"numpy"}),
		DepKey("sha256:aa", pip, "https://mirror.test/simple", []string{"numpy"}),
		DepKey("sha256:aa", pip, "https://pypi.org/simple", []string{"numpy==1.0"}),
	} {
		if other == a {
			t.Error("different layers, indexes or sets gave the same key")
		}
	}
	if !hexRE().MatchString(a) || a != DepKey("sha256:aa", pip, "https://pypi.org/simple", []string{"numpy"}) {
		t.Errorf("key %q is not stable 64 hex digits", a)
	}
	argv, err := pip.Argv("http://pypi.test:8080/simple", []string{"numpy"})
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(argv, " ")
	if !strings.Contains(s, "--index-url http://pypi.test:8080/simple") || !strings.Contains(s, "--trusted-host pypi.test") || argv[len(argv)-1] != "numpy" {
		t.Errorf("pip argv for an http index: %q", argv)
	}
	argv, _ = pip.Argv("https://pypi.org/simple", []string{"numpy"})
	if strings.Contains(strings.Join(argv, " "), "--trusted-host") {
		t.Errorf("pip argv for an https index trusts the host: %q", argv)
	}
	if _, err := pip.Argv("http://user:pw@evil/", nil); err == nil {
		t.Error("an index URL with credentials was accepted")
	}
}

// TestCopyUntrusted: links are copied, never followed; special files are
// dropped; modes are normalised; a sparse file past the cap is refused.
func TestCopyUntrusted(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "pkg", "sub"), 0o700)
	os.WriteFile(filepath.Join(src, "pkg", "a.py"), []byte("x = 1\n"), 0o600)
	os.WriteFile(filepath.Join(src, "pkg", "tool"), []byte("#!/bin/sh\n"), 0o4755)
	os.Symlink("/etc/shadow", filepath.Join(src, "pkg", "escape"))
	unix.Mkfifo(filepath.Join(src, "pkg", "fifo"), 0o644)
	dst := filepath.Join(t.TempDir(), "root")
	n, files, err := copyUntrusted(src, dst, 1<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len("x = 1\n")+len("#!/bin/sh\n")) || files != 5 {
		t.Errorf("copied %d bytes, %d entries", n, files)
	}
	if target, err := os.Readlink(filepath.Join(dst, "pkg", "escape")); err != nil || target != "/etc/shadow" {
		t.Errorf("symlink: %q %v (want it copied as a link)", target, err)
	}
	for name, want := range map[string]os.FileMode{"pkg/a.py": 0o644, "pkg/tool": 0o755, "pkg/sub": os.ModeDir | 0o755} {
		fi, err := os.Lstat(filepath.Join(dst, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v %v, want %v", name, fi.Mode(), err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "pkg", "fifo")); err == nil {
		t.Error("a fifo was copied")
	}
	sparse, _ := os.Create(filepath.Join(src, "sparse"))
	sparse.Truncate(1 << 30)
	sparse.Close()
	if _, _, err := copyUntrusted(src, filepath.Join(t.TempDir(), "root"), 1<<20, 100); err == nil {
		t.Error("a 1 GiB sparse file passed a 1 MiB cap")
	}
	if _, _, err := copyUntrusted(src, filepath.Join(t.TempDir(), "root"), 2<<30, 3); err == nil {
		t.Error("6 entries passed a cap of 3")
	}
}
