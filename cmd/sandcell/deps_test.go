package main

import (
	"go/build"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sandcell/sandcell/"

// floor is one level of the house. A package may import packages of lower
// floors; of its own floor only when Peers says so (with the reason); and
// never what a rule below denies it. Every package of the module sits on
// exactly one floor: a new package is placed here, with the reason, before
// it can be imported by anyone.
type floor struct {
	Name string
	// Why the floor is where it is.
	Why string
	// Packages are paths relative to the module; "dir/*" is every package
	// directly under dir.
	Packages []string
	// Peers, if set, is why packages of this floor may import each other.
	Peers string
}

// floors, lowest first. One request's path runs down them: binaries wire
// front ends to the service, the service to the executor, the executor
// to a runtime it is given, the runtimes to the sandbox policy.
var floors = []floor{
	{Name: "wire", Packages: []string{"api"},
		Why: "api holds the wire types and refusal classes that every floor speaks; it imports nothing of ours, so a type can cross any line"},
	{Name: "leaves", Packages: []string{"internal/*"},
		Why:   "a leaf does one job for any floor (owner tokens, copying, the worker pool, the egress proxy, workspaces on disk): it may know the wire types and nothing of sandboxes, requests or front ends",
		Peers: "a leaf may build on another leaf (egress on netcopy, sysmon and workspace on owner): still nothing above"},
	{Name: "sandbox policy", Packages: []string{"seccomp", "limits", "rootfs"},
		Why: "what a sandbox is allowed and made of: the seccomp profile (data), limits and cgroups, the layer catalogue and store; no runtime, no request"},
	{Name: "kernels in live sandboxes", Packages: []string{"interp"},
		Why: "interp runs the kernel drivers as processes of a live sandbox through api.Sandboxes alone (the sandbox's limits and network policy hold for it): it reads the catalogue's drivers and knows no runtime, executor or service, so nothing it does bypasses the service's checks"},
	{Name: "runtime core", Packages: []string{"oci"},
		Why: "oci is the backend-neutral core: the request, the spec, the output caps, the verdict and the Runtime interface that every backend implements"},
	{Name: "backends", Packages: []string{"oci/*", "oci/backend/*", "wasm"},
		Why:   "the runtimes themselves (libcontainer and its fork server, gVisor, wasm): each implements oci.Runtime on top of the core",
		Peers: "a backend may build on another (gVisor prepares its bundle with libcontainer's spec and host; the fork server embeds the zygote's C)"},
	{Name: "centre", Packages: []string{"executor"},
		Why: "executor turns one request into one plan and runs it on the runtimes it is given: it knows the core's interface, never a backend (rules below)"},
	{Name: "runtime assembly", Packages: []string{"runtimes"},
		Why: "builds the concrete backends of one instance (cgroup parent, libcontainer, pools, gVisor and wasm on first use) and hands them to executor through its interfaces"},
	{Name: "protocol", Packages: []string{"mcp"},
		Why: "mcp is the protocol written by hand: it defines the interfaces its tools call (Sandbox, Installer, Kernels) and knows nothing of containers (rules below)"},
	{Name: "service", Packages: []string{"service"},
		Why: "service keeps what outlives a call (sessions and their locks, kernels, the gate, expiry) and implements mcp's interfaces over the executor"},
	{Name: "front ends", Packages: []string{"rest", "batch", "e2b"},
		Why: "the other ways in (Piston and Judge0 over HTTP, batch evaluation, E2B's APIs over live sandboxes): thin adapters over the executor or api.Sandboxes; siblings, so what they share lives below both"},
	{Name: "assemblers", Packages: []string{"cmd/internal/*"},
		Why:   "configuration and what is built from it for the binaries (config, bench, doctor, metrics): above everything they assemble, reachable only from cmd",
		Peers: "bench and doctor build on config, the one definition of every setting"},
	{Name: "binaries", Packages: []string{"cmd/*"},
		Why: "flags, wiring, the init re-exec hooks; nothing imports a binary"},
}

// denied are arrows that the floors would allow but the design forbids,
// each with its reason: importer -> imported (patterns as in floor).
var denied = []struct{ From, To, Why string }{
	{"executor", "oci/...", "the centre runs its plan on the runtimes it is given (Options): naming a backend is a missing seam (issue #36)"},
	{"executor", "wasm", "the centre runs its plan on the runtimes it is given: a type switch on a backend is a missing seam (issue #36)"},
	{"executor", "runtimes", "the assembly builds what executor is given; executor never builds its own runtimes"},
	{"service", "oci", "kernels and runs go through executor: service holds sessions, not sandboxes"},
	{"service", "oci/...", "kernels and runs go through executor: service holds sessions, not sandboxes"},
	{"service", "runtimes", "service is given an executor; it builds no runtime"},
	{"service", "wasm", "service is given an executor; it names no backend"},
	{"mcp", "executor", "protocol only: tools reach sandboxes through mcp's own interfaces"},
	{"mcp", "oci", "protocol only: tools reach sandboxes through mcp's own interfaces"},
	{"mcp", "oci/...", "protocol only"},
	{"mcp", "wasm", "protocol only"},
	{"mcp", "runtimes", "protocol only"},
	{"mcp", "rootfs", "protocol only: the language list reaches it through its interfaces"},
	{"mcp", "seccomp", "protocol only"},
	{"rest", "oci", "a front end speaks to the executor, never to a runtime"},
	{"rest", "oci/...", "a front end speaks to the executor, never to a runtime"},
	{"rest", "wasm", "a front end speaks to the executor, never to a runtime"},
	{"rest", "runtimes", "a front end is given its executor"},
	{"batch", "oci", "a front end speaks to the executor, never to a runtime"},
	{"batch", "oci/...", "a front end speaks to the executor, never to a runtime"},
	{"batch", "wasm", "a front end speaks to the executor, never to a runtime"},
	{"batch", "runtimes", "a front end is given its executor"},
	{"e2b", "oci", "the E2B drop-in speaks to live sandboxes through api.Sandboxes, never to a runtime"},
	{"e2b", "oci/...", "the E2B drop-in speaks to live sandboxes through api.Sandboxes, never to a runtime"},
	{"e2b", "wasm", "the E2B drop-in speaks to live sandboxes through api.Sandboxes, never to a runtime"},
	{"e2b", "runtimes", "the E2B drop-in is given its api.Sandboxes"},
	{"e2b", "executor", "the E2B drop-in is given its api.Sandboxes and Kernels; it runs nothing itself"},
	{"e2b", "service", "the binary hands the service to e2b as api.Sandboxes: e2b names no implementation"},
}

// libcontainerImporters may import runc's libcontainer: the backend that
// drives it. The core (oci) stays free of it, so wasm and the executor
// link no libcontainer code through the types they share.
var libcontainerImporters = []string{"oci/backend", "oci/backend/..."}

// match reports whether pkg is named by pattern ("dir/*": one level under
// dir; "dir/...": any depth under it).
func match(pattern, pkg string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return strings.HasPrefix(pkg, dir+"/")
	}
	if dir, ok := strings.CutSuffix(pattern, "/*"); ok {
		return path.Dir(pkg) == dir
	}
	return pattern == pkg
}

// floorOf is the index of pkg's floor, or -1.
func floorOf(pkg string) int {
	for i, f := range floors {
		for _, p := range f.Packages {
			if match(p, pkg) {
				return i
			}
		}
	}
	return -1
}

// arrowError is why from may not import to ("" when it may).
func arrowError(from, to string) string {
	for _, d := range denied {
		if match(d.From, from) && match(d.To, to) {
			return "denied: " + d.Why
		}
	}
	ff, ft := floorOf(from), floorOf(to)
	switch {
	case ft < 0:
		return to + " sits on no floor: place it in floors with a reason"
	case ft > ff:
		return "runs up from floor " + floors[ff].Name + " to floor " + floors[ft].Name
	case ft == ff && floors[ff].Peers == "":
		return "floor " + floors[ff].Name + " has no arrows among its packages"
	}
	return ""
}

// modulePackages lists the module's package directories (relative,
// slash-separated), skipping testdata and nested modules.
func modulePackages(t *testing.T, root string) map[string]*build.Package {
	t.Helper()
	pkgs := map[string]*build.Package{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != root {
			if name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || name == "bin" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module (conformance, deploy/k8s/validate)
			}
		}
		pkg, err := build.ImportDir(p, 0)
		if err != nil {
			return nil // no Go files here
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		pkgs[filepath.ToSlash(rel)] = pkg
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestImportArrows keeps the house's floors: every package sits on one,
// imports only what its floor and the denials allow, and only the
// runtime packages import libcontainer.
func TestImportArrows(t *testing.T) {
	pkgs := modulePackages(t, "../..")
	if len(pkgs) < 25 {
		t.Fatalf("found only %d packages; the walk is wrong", len(pkgs))
	}
	for name, pkg := range pkgs {
		if len(pkg.GoFiles) == 0 {
			continue // tests only (packaging): nothing imports it
		}
		if floorOf(name) < 0 {
			t.Errorf("%s sits on no floor: place it in floors with a reason", name)
			continue
		}
		for _, imp := range pkg.Imports {
			if target, ok := strings.CutPrefix(imp, module); ok {
				if why := arrowError(name, target); why != "" {
					t.Errorf("%s imports %s: %s", name, target, why)
				}
			}
			if strings.HasPrefix(imp, "github.com/opencontainers/runc/") &&
				!slices.ContainsFunc(libcontainerImporters, func(p string) bool { return match(p, name) }) {
				t.Errorf("%s imports %s: only the runtime packages import libcontainer", name, imp)
			}
		}
	}
}

// TestImportRules checks the rules themselves, so that a change to them
// that lets an arrow through is seen.
func TestImportRules(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"executor", "oci", true},
		{"executor", "oci/backend", false},
		{"executor", "oci/backend/zygote", false},
		{"service", "oci/backend", false},
		{"executor", "wasm", false},
		{"service", "oci", false},
		{"service", "executor", true},
		{"rest", "batch", false},
		{"batch", "rest", false},
		{"internal/egress", "internal/netcopy", true},
		{"internal/workspace", "executor", false},
		{"internal/egress", "oci", false},
		{"mcp", "limits", true},
		{"mcp", "executor", false},
		{"oci", "executor", false},
		{"limits", "oci", false},
		{"api", "limits", false},
		{"cmd/internal/config", "executor", true},
		{"executor", "cmd/internal/config", false},
		{"cmd/sandcell", "cmd/sandcell-bench", false},
		{"rootfs", "somewhere/new", false},
	} {
		if got := arrowError(c.from, c.to) == ""; got != c.ok {
			t.Errorf("arrow %s -> %s allowed = %v, want %v (%s)", c.from, c.to, got, c.ok, arrowError(c.from, c.to))
		}
	}
	for _, f := range floors {
		if f.Why == "" {
			t.Errorf("floor %s gives no reason", f.Name)
		}
	}
}
