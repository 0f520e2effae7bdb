package rootfs

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// openTree writes, at root, what Debian's packages leave writable by other
// users (issue #37): /var/tmp and /var/lock 1777, php's session directory
// 1733, base-files' /var/local 2775, and a 0666 file.
func openTree(t *testing.T, root string) {
	t.Helper()
	mkdirs(t, root, "usr/bin", "var/tmp", "var/lock", "var/lib/php/sessions", "var/local")
	writeFiles(t, root, map[string]string{"usr/share/open.txt": "x\n"})
	for name, mode := range map[string]fs.FileMode{
		"var/tmp":              fs.ModeSticky | 0o777,
		"var/lock":             fs.ModeSticky | 0o777,
		"var/lib/php/sessions": fs.ModeSticky | 0o733,
		"var/local":            fs.ModeSetgid | 0o775,
		"usr/share/open.txt":   0o666,
	} {
		if err := os.Chmod(filepath.Join(root, name), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// openLayer commits a layer of recipe r holding openTree as a build does
// after extracting (finish, commitLayer) and points r's key at it.
func openLayer(t *testing.T, s *Store, name string, r recipe) Manifest {
	t.Helper()
	tmp, err := s.newBuildDir(r.key())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(tmp, "root")
	openTree(t, root)
	open, err := s.finish(t.Context(), name, r, root)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.commitLayer(t.Context(), name, r, []Package{{Name: name, Version: "1.0", Arch: "all"}}, nil, open, tmp, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.setRecipe(r.key(), m.ID); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkClosed fails t for every entry of the layer tree dir that group or
// others may write, and if uid 65534 can create or change a file in it.
func checkClosed(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err == nil && openToOthers(fi.Mode()) {
			t.Errorf("%s: mode %v: writable by other host users", p, fi.Mode())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := asNobody(dir); err == nil {
		t.Errorf("another host user (uid 65534) planted a file in the layer %s: %s", dir, out)
	}
}

// asNobody tries, as uid 65534, to create a file in the layer tree dir's
// world-writable directories or to change its 0666 file.
func asNobody(dir string) ([]byte, error) {
	cmd := exec.Command("/bin/sh", "-c", `echo >"$1/var/tmp/planted" || echo >"$1/var/lib/php/sessions/planted" || echo >"$1/tmp/planted" || echo >>"$1/usr/share/open.txt"`, "sh", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd.CombinedOutput()
}

// TestLayersClosedToHostUsers (issue #37): a package layer's entries that
// Debian ships writable by every user (/var/tmp 1777...) are not writable
// by other host users in the store, whose path stays traversable (a
// rootless store mounts root's layers), so no local user plants a file in
// every run. The tree hash is the layer's as built, its modes recorded; a
// layer of a store built before is closed when its language is next used
// (and still verifies), and a layer opened again fails Verify.
func TestLayersClosedToHostUsers(t *testing.T) {
	requireRoot(t)
	top := t.TempDir()
	for _, d := range []string{top, filepath.Dir(top)} {
		if err := os.Chmod(d, 0o755); err != nil { // traversable, as a store's parents are
			t.Fatal(err)
		}
	}
	s := &Store{Dir: filepath.Join(top, "store"), Logger: testLogger(t)}
	t.Cleanup(func() { s.Close() })
	lang := mustLookup(t, "sh")
	specs, err := chain(lang)
	if err != nil {
		t.Fatal(err)
	}
	skel := fakeLayer(t, s, KindSkeleton, skeletonRecipe(), nil)
	base := openLayer(t, s, specs[0].name, specs[0].recipe(nil))
	lower := []string{base.ID}
	for _, spec := range specs[1:] {
		lower = append([]string{fakeLayer(t, s, spec.name, spec.recipe(lower), map[string]string{spec.name + ".txt": "x\n"})}, lower...)
	}
	baseRoot, skelRoot := s.layerRoot(hexID(base.ID)), s.layerRoot(hexID(skel))

	// Built: closed, the modes as built recorded, the hash of the tree as
	// built.
	checkClosed(t, baseRoot)
	wantModes := map[string]string{"/var/tmp": "1777", "/var/lock": "1777", "/var/lib/php/sessions": "1777", "/var/local": "775", "/usr/share/open.txt": "666"}
	if !base.HostClosed || !maps.Equal(base.OpenModes, wantModes) {
		t.Errorf("base manifest: host closed %v, open modes %v; want true, %v", base.HostClosed, base.OpenModes, wantModes)
	}
	asBuilt := filepath.Join(t.TempDir(), "root")
	openTree(t, asBuilt)
	if err := finishPackages(asBuilt); err != nil {
		t.Fatal(err)
	}
	if th, err := hashTree(t.Context(), asBuilt); err != nil || th.Digest != base.Tree.Digest {
		t.Errorf("tree hash %s; want the hash of the tree as built, %s (%v)", base.Tree.Digest, th.Digest, err)
	}
	if err := s.Verify(t.Context(), lang); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if sk, err := readManifest(layerRef{hex: hexID(skel), store: filepath.Dir(filepath.Dir(filepath.Dir(skelRoot)))}); err != nil || sk.OpenModes["/tmp"] != "1777" {
		t.Errorf("skeleton manifest: open modes %v, %v; want /tmp 1777", sk.OpenModes, err)
	}

	// reopen makes the layer at root (a layer's root directory) what an
	// older store has: its entries open again, the manifest without the
	// record. interrupted: what a migration killed midway leaves instead,
	// the record written, /var/tmp closed already, the rest open.
	reopen := func(root string, interrupted bool) {
		t.Helper()
		ldir := filepath.Dir(root)
		m, err := readManifest(layerRef{hex: filepath.Base(ldir), store: filepath.Dir(filepath.Dir(ldir))})
		if err != nil {
			t.Fatal(err)
		}
		modes, err := parseModes(m.OpenModes)
		if err != nil {
			t.Fatal(err)
		}
		for name, mode := range modes {
			if interrupted && name == "var/tmp" {
				continue
			}
			if err := syscall.Chmod(filepath.Join(root, name), mode); err != nil {
				t.Fatal(err)
			}
		}
		m.HostClosed = false
		if !interrupted {
			m.OpenModes = nil
		}
		if err := writeManifest(ldir, m); err != nil {
			t.Fatal(err)
		}
	}
	migrated := func() {
		t.Helper()
		if _, err := s.Root(lang); err != nil {
			t.Fatal(err)
		}
		checkClosed(t, baseRoot)
		checkClosed(t, skelRoot)
		if m, err := readManifest(layerRef{hex: hexID(base.ID), store: filepath.Dir(filepath.Dir(filepath.Dir(baseRoot)))}); err != nil ||
			!m.HostClosed || !maps.Equal(m.OpenModes, wantModes) {
			t.Errorf("migrated base manifest: host closed %v, open modes %v, %v; want true, %v", m.HostClosed, m.OpenModes, err, wantModes)
		}
		if err := s.Verify(t.Context(), lang); err != nil {
			t.Errorf("Verify of the migrated layers: %v", err)
		}
	}

	// A store built before: Root closes its layers.
	reopen(baseRoot, false)
	reopen(skelRoot, false)
	if out, err := asNobody(baseRoot); err != nil {
		t.Fatalf("the old layer is not open to uid 65534 (the test's premise): %v %s", err, out)
	}
	for _, p := range []string{"var/tmp/planted", "var/lib/php/sessions/planted"} {
		os.Remove(filepath.Join(baseRoot, p))
	}
	if err := s.Verify(t.Context(), lang); err != nil {
		t.Fatalf("Verify of the old layer: %v", err)
	}
	migrated()

	// A migration interrupted after some entries were closed: the next
	// one keeps the modes recorded first.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	reopen(baseRoot, true)
	migrated()

	// Opened again behind the store's back: Verify says so.
	if err := os.Chmod(filepath.Join(baseRoot, "var/tmp"), fs.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(t.Context(), lang); !errors.Is(err, ErrModified) {
		t.Errorf("Verify of a layer opened again: %v; want ErrModified", err)
	}
}
