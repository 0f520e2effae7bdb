package executor

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/rootfs"
)

// TestInstaller checks the allowlist an install gets: the operator's (or
// the catalogue's) plus the index's own host.
func TestInstaller(t *testing.T) {
	a := &Executor{opts: Options{Settings: Settings{Deps: DepsOptions{
		Index: map[string]string{"py": "http://Mirror.test:8080/simple"},
		Allow: map[string][]string{"javascript": {"registry.test:443"}},
		Hosts: map[string][]netip.Addr{"mirror.test": {netip.MustParseAddr("10.0.0.5")}},
	}}}}
	py, _ := rootfs.Lookup("python")
	inst, err := a.installer(py)
	index, allow := inst.index, inst.allow
	if err != nil || index != "http://Mirror.test:8080/simple" || !slices.Contains(allow, "mirror.test:8080") || !slices.Contains(allow, "pypi.org:443") {
		t.Errorf("python install: index %q allow %q %v", index, allow, err)
	}
	js, _ := rootfs.Lookup("javascript")
	inst, err = a.installer(js)
	index, allow = inst.index, inst.allow
	if err != nil || index != "https://registry.npmjs.org/" || !slices.Equal(allow, []string{"registry.test:443", "registry.npmjs.org:443"}) {
		t.Errorf("javascript install: index %q allow %q %v", index, allow, err)
	}
	a.opts.Deps.Off = true
	if _, err := a.installer(py); err == nil || !strings.Contains(err.Error(), "turned off") {
		t.Errorf("installs off: %v", err)
	}
}
