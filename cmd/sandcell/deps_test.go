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
// import none of ours.
var allowedImports = map[string][]string{
	"cmd/sandcell":    {"mcp", "oci", "limits", "rootfs", "seccomp", "internal/workspace", "internal/humaneval", "internal/egress"},
	"oci":             {"limits", "rootfs", "seccomp", "internal/netcopy"},
	"internal/egress": {"internal/netcopy"},
	"mcp":             {"limits"},
}

// TestImportArrows keeps the package boundaries: the arrows point one way,
// nothing imports cmd, and only oci imports libcontainer.
func TestImportArrows(t *testing.T) {
	dirs, err := filepath.Glob("../../*")
	if err != nil {
		t.Fatal(err)
	}
	internal, err := filepath.Glob("../../internal/*")
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(append(dirs, internal...), ".")
	checked := 0
	for _, dir := range dirs {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			continue // not a Go package (docs, testdata)
		}
		name := strings.TrimPrefix(pkg.ImportPath, module)
		switch {
		case dir == ".":
			name = "cmd/sandcell"
		case filepath.Base(filepath.Dir(dir)) == "internal":
			name = "internal/" + filepath.Base(dir)
		default:
			name = filepath.Base(dir)
		}
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
	if checked < 5 {
		t.Errorf("checked only %d packages; the glob is wrong", checked)
	}
}
