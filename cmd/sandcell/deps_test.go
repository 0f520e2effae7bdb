package main

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/sandcell/sandcell/"

// allowedImports is the architecture's import arrows (DEVELOPERS.md): which
// of our packages each package may import. A package missing here may
// import none of ours. One request's path points down the list:
// cmd -> service -> executor -> oci -> limits, seccomp, rootfs; api (the
// wire types) is imported by all and imports nothing.
var allowedImports = map[string][]string{
	"cmd/sandcell":         {"api", "service", "batch", "executor", "mcp", "rest", "oci", "limits", "rootfs", "cmd/internal/config", "cmd/internal/doctor", "internal/health", "internal/workspace", "cmd/internal/metrics", "internal/version", "internal/progress"},
	"cmd/sandcell-bench":   {"api", "batch", "executor", "oci", "limits", "rootfs", "cmd/internal/bench", "cmd/internal/config"},
	"cmd/internal/bench":   {"api", "batch", "executor", "oci", "limits", "rootfs", "seccomp", "cmd/internal/config", "internal/humaneval", "internal/par", "internal/sysmon"},
	"cmd/internal/metrics": {"executor", "oci"},
	"cmd/internal/config":  {"executor", "oci", "limits", "rootfs", "internal/egress"},
	"cmd/internal/doctor":  {"cmd/internal/config", "oci", "limits", "rootfs"},
	"service":              {"api", "executor", "mcp", "oci", "limits", "rootfs", "internal/workspace"},
	"batch":                {"api", "executor", "limits", "internal/humaneval", "internal/par", "internal/progress"},
	"rest":                 {"api", "batch", "executor", "limits", "rootfs"},
	"executor":             {"api", "oci", "limits", "rootfs", "seccomp", "internal/egress", "internal/sysmon", "wasm"},
	"wasm":                 {"api", "oci", "limits", "internal/owner"},
	"oci":                  {"api", "limits", "internal/netcopy", "internal/owner", "internal/sysmon", "oci/zygote"},
	"mcp":                  {"api", "limits"},
	"limits":               {"api"},
	"rootfs":               {"api"},
	"internal/workspace":   {"api", "internal/owner"},
	"internal/egress":      {"internal/netcopy"},
	"internal/sysmon":      {"internal/owner"},
}

// TestImportArrows keeps the package boundaries: the arrows point one way,
// nothing imports cmd, and only oci imports libcontainer.
func TestImportArrows(t *testing.T) {
	dirs, err := filepath.Glob("../../*")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"internal", "cmd", "oci", "cmd/internal"} {
		more, err := filepath.Glob("../../" + sub + "/*")
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, more...)
	}
	checked := 0
	for _, dir := range dirs {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			continue // not a Go package (docs, testdata)
		}
		rel, err := filepath.Rel("../..", dir)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.ToSlash(rel)
		checked++
		allowed := map[string]bool{}
		for _, a := range allowedImports[name] {
			allowed[a] = true
		}
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, module) {
				target := strings.TrimPrefix(imp, module)
				if !allowed[target] {
					t.Errorf("%s imports %s: not an allowed arrow", name, target)
				}
			}
			if strings.HasPrefix(imp, "github.com/opencontainers/runc/") && name != "oci" {
				t.Errorf("%s imports %s: only oci may import libcontainer", name, imp)
			}
		}
	}
	if checked < 15 {
		t.Errorf("checked only %d packages; the glob is wrong", checked)
	}
}
