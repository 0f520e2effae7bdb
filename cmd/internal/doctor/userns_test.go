package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSysctls makes a /proc/sys tree with the given knobs ("" : absent).
func fakeSysctls(t *testing.T, apparmor, clone, maxNS string) string {
	t.Helper()
	root := t.TempDir()
	for p, v := range map[string]string{sysctlAppArmor: apparmor, sysctlClone: clone, sysctlMax: maxNS} {
		if v == "" {
			continue
		}
		f := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDiagnoseUserNS(t *testing.T) {
	refused := errors.New("fork/exec /bin/true: operation not permitted")
	for _, c := range []struct {
		name                   string
		apparmor, clone, maxNS string
		probe                  error
		root                   bool
		works                  bool
		reason, fix            string
	}{
		{"works", "0", "1", "15000", nil, false, true, "", ""},
		{"ubuntu's apparmor restriction", "1", "", "15000", refused, false, false, "apparmor_restrict_unprivileged_userns=1", "apparmor_parser -r /etc/apparmor.d/sandcell"},
		{"debian's old knob", "", "0", "15000", refused, false, false, "unprivileged_userns_clone=0", "unprivileged_userns_clone=1"},
		{"none allowed", "", "", "0", refused, false, false, "max_user_namespaces=0", "max_user_namespaces=15000"},
		{"a seccomp filter, no sysctl", "0", "1", "15000", refused, false, false, "seccomp filter", "seccomp profile"},
		{"root, users restricted", "1", "", "15000", nil, true, false, "apparmor", "apparmor_parser"},
		{"root, nothing restricted", "", "", "15000", nil, true, true, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := DiagnoseUserNS(fakeSysctls(t, c.apparmor, c.clone, c.maxNS), c.probe, c.root)
			if u.Works != c.works {
				t.Errorf("works = %v, want %v (%+v)", u.Works, c.works, u)
			}
			if !strings.Contains(u.Reason, c.reason) || (c.reason == "" && u.Reason != "") {
				t.Errorf("reason %q, want it to say %q", u.Reason, c.reason)
			}
			if !strings.Contains(u.Fix, c.fix) || (c.fix == "" && u.Fix != "") {
				t.Errorf("fix %q, want it to say %q", u.Fix, c.fix)
			}
			if c.probe != nil && !strings.Contains(u.Reason, c.probe.Error()) {
				t.Errorf("reason %q hides the probe's error", u.Reason)
			}
		})
	}
}

// The profile the fix names is the one the project ships, and it grants
// user namespaces to the installed binary's paths.
func TestAppArmorProfileShipped(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", AppArmorProfile))
	if err != nil {
		t.Fatal(err)
	}
	p := string(b)
	for _, want := range []string{"userns,", "profile sandcell ", "/{usr/,usr/local/,opt/sandcell/}bin/sandcell", "flags=(unconfined)"} {
		if !strings.Contains(p, want) {
			t.Errorf("%s lacks %q", AppArmorProfile, want)
		}
	}
	if !strings.Contains(AppArmorInstall, AppArmorProfile) {
		t.Errorf("the install command %q does not install %s", AppArmorInstall, AppArmorProfile)
	}
}
