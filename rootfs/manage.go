package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Build builds the language's layers that are missing: the skeleton, the
// base, the layers of the language it extends and its own. Layers already
// built are kept, so building a second language reuses the base. Concurrent
// builds of one layer, in this process or others, wait for each other and
// build it once. Cancelling ctx stops the build (mmdebstrap and setup steps
// are killed) and removes its temporary directory.
//
// Layers are built into Dir only; layers a shared store has (Shared) are
// used, not built again.
//
// Preconditions: root, or root of a user namespace with its own mount
// namespace (rootless sandcell; see Manifest.SquashedOwners for how its
// layers may differ), for mmdebstrap's root mode and chroot(2); mmdebstrap
// installed; the Debian mirror reachable. Only builds reach the network;
// runs never do.
func (s *Store) Build(ctx context.Context, lang Language) error {
	return s.BuildWith(ctx, lang, nil)
}

// BuildWith is Build reporting progress to fn (nil: no reports). fn is
// called from the building goroutine; it must not block for long.
func (s *Store) BuildWith(ctx context.Context, lang Language, fn func(Progress)) error {
	if err := lang.check(); err != nil {
		return fmt.Errorf("%w %q: %w", ErrUnknownLanguage, lang.Name, err)
	}
	if _, err := s.resolve(lang); !errors.Is(err, ErrNotBuilt) || lang.Image != "" {
		return err // built already (or imported: an image is not built), or a real error
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("building the %s layers needs root, or root of a user namespace (mmdebstrap root mode and chroot)", lang.Name)
	}
	dir, err := s.dir()
	if err != nil {
		return err
	}
	if err := mkdirAll(filepath.Join(dir, locksDir)); err != nil {
		return fmt.Errorf("create store: %w", err)
	}
	s.warnUntraversable(dir)
	unlock, err := lockWait(ctx, filepath.Join(dir, locksDir, storeLock), true, func() {
		s.log().Info("waiting for a prune to finish", "language", lang.Name)
	})
	if err != nil {
		return fmt.Errorf("lock store: %w", err)
	}
	defer unlock()

	specs, err := chain(lang)
	if err != nil {
		return err
	}
	todo, err := s.missing(specs)
	if err != nil {
		return err
	}
	p := Progress{Language: lang.Name, Total: todo * stepsPerLayer}
	layersDone := 0
	report := func(layer, step string) {
		p.Layer, p.Step = layer, step
		switch step {
		case "setup":
			p.Done = layersDone*stepsPerLayer + 1
		case "finish":
			p.Done = layersDone*stepsPerLayer + 2
		case "hash":
			p.Done = layersDone*stepsPerLayer + 3
		case "done":
			layersDone++
			p.Done = min(layersDone*stepsPerLayer, p.Total)
		default: // wait, extract
			p.Done = layersDone * stepsPerLayer
		}
		if fn != nil {
			fn(p)
		}
	}

	start := time.Now()
	if _, err := s.ensureLayer(ctx, KindSkeleton, skeletonRecipe(), report); err != nil {
		return fmt.Errorf("build skeleton layer: %w", err)
	}
	var lower []string
	for _, spec := range specs {
		id, err := s.ensureLayer(ctx, spec.name, spec.recipe(lower), report)
		if err != nil {
			return fmt.Errorf("build %s layer: %w", spec.name, err)
		}
		lower = append([]string{id}, lower...)
	}
	s.log().Info("language built", "language", lang.Name, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// missing counts the layers of specs (plus the skeleton) that are not built.
// Once one is missing, every layer above it is too: its recipe names the
// new layer's id.
func (s *Store) missing(specs []layerSpec) (int, error) {
	n := 0
	if _, ok, err := s.lookupRecipe(skeletonRecipe().key()); err != nil {
		return 0, err
	} else if !ok {
		n++
	}
	var lower []string
	for i, spec := range specs {
		ref, ok, err := s.lookupRecipe(spec.recipe(lower).key())
		if err != nil {
			return 0, err
		}
		if !ok {
			return n + len(specs) - i, nil
		}
		lower = append([]string{ref.id()}, lower...)
	}
	return n, nil
}

// ensureLayer returns the id of the layer built from r, building it unless
// it exists. One builder per recipe: the others wait on its lock, then find
// the layer.
func (s *Store) ensureLayer(ctx context.Context, name string, r recipe, report func(layer, step string)) (string, error) {
	key := r.key()
	if ref, ok, err := s.lookupRecipe(key); err != nil || ok {
		return ref.id(), err
	}
	dir, err := s.dir()
	if err != nil {
		return "", err
	}
	unlock, err := lockWait(ctx, filepath.Join(dir, locksDir, "recipe-"+key+".lock"), false, func() {
		s.log().Info("waiting for another build", "layer", name)
		report(name, "wait")
	})
	if err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer unlock()
	if ref, ok, err := s.lookupRecipe(key); err != nil || ok {
		if ok {
			report(name, "done")
		}
		return ref.id(), err // another builder finished while we waited
	}
	s.log().Info("building layer", "layer", name, "kind", r.Kind, "packages", r.Packages)
	m, err := s.buildLayer(ctx, name, r, func(step string) { report(name, step) })
	if err != nil {
		return "", err
	}
	if err := s.setRecipe(key, m.ID); err != nil {
		return "", err
	}
	s.log().Info("layer built", "layer", name, "id", m.ID, "bytes", m.Bytes, "files", m.Tree.Entries,
		"packages", len(m.Packages), "duration", time.Duration(m.BuildSeconds*float64(time.Second)).Round(time.Millisecond))
	report(name, "done")
	return m.ID, nil
}

// setRecipe points recipes/<key> at the layer id, atomically.
func (s *Store) setRecipe(key, id string) error {
	dir, err := s.dir()
	if err != nil {
		return err
	}
	rdir := filepath.Join(dir, recipesDir)
	if err := mkdirAll(rdir); err != nil {
		return err
	}
	tmp := filepath.Join(rdir, fmt.Sprintf(".%s.%d", key, os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink("../"+layersDir+"/"+hexID(id), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(rdir, key)); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncfs(rdir)
}

// Ensure returns the language's root (see Root), first building its
// missing layers with progress reported to fn: what a server does on the
// first use of a language. A server that must not build (offline or
// locked-down hosts) calls Root instead, whose error names the command
// that builds the layers.
func (s *Store) Ensure(ctx context.Context, lang Language, fn func(Progress)) (string, error) {
	root, err := s.Root(lang)
	if !errors.Is(err, ErrNotBuilt) {
		return root, err
	}
	if err := s.BuildWith(ctx, lang, fn); err != nil {
		return "", err
	}
	return s.Root(lang)
}

// Clean removes what killed processes left: temporary directories of
// builds whose builder is gone (a build in progress, in this or another
// process, holds its lock and is left alone), and roots that no language of
// the catalogue uses any more (unmounted: sandboxes running on them keep
// their copies). Layers are never touched; see Prune. Only Dir is cleaned,
// never a shared store. A missing Dir is clean. Run it at start-up.
func (s *Store) Clean() error {
	dir, err := s.dir()
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var errs []error
	entries, err := os.ReadDir(filepath.Join(dir, tmpDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		lock, ok := tmpLock(e.Name())
		if !ok {
			continue
		}
		p := filepath.Join(dir, tmpDir, e.Name())
		unlock, locked, err := tryLock(filepath.Join(dir, locksDir, lock))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !locked {
			s.log().Info("build in progress, not cleaning", "dir", p)
			continue
		}
		err = removeTree(p)
		unlock()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.log().Info("removed stale build", "dir", p)
	}
	_, err = s.removeRoots(s.liveRoots())
	return errors.Join(append(errs, err)...)
}

// liveRoots are the root ids of the catalogue's built languages and of
// the imported images.
func (s *Store) liveRoots() map[string]bool {
	live := map[string]bool{}
	for _, l := range usedLayers() {
		if st, err := s.resolve(l); err == nil {
			live[st.rootID()] = true
		}
	}
	s.imageRoots(live)
	return live
}

// removeRoots unmounts and removes every root directory not in live.
func (s *Store) removeRoots(live map[string]bool) (int, error) {
	dir, err := s.dir()
	if err != nil {
		return 0, err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	entries, err := os.ReadDir(filepath.Join(dir, rootsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, e := range entries {
		if live[e.Name()] || !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, rootsDir, e.Name())
		if err := s.unmountRoot(p); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		s.log().Info("removed stale root", "root", p)
	}
	return n, errors.Join(errs...)
}

// Pruned says what Prune removed.
type Pruned struct {
	// Layers are the ids of the removed layers.
	Layers []string `json:"layers"`
	// Bytes is their total size.
	Bytes int64 `json:"bytes"`
	// Roots is the number of stale roots unmounted and removed.
	Roots int `json:"roots"`
	// Other are other entries removed: stale recipe pointers, temporary
	// builds, the previous store format's layers.
	Other []string `json:"other"`
}

// Prune removes the layers that no language of the catalogue uses (left by
// an older catalogue or by rebuilt layers), their roots and recipe
// pointers, leftover builds, lock files no one holds, and layers of the previous store format
// (Dir/layers/<name>/, the old default /var/lib/sandcell/layers), and
// image layers no imported image uses (Store.Images). It waits for running builds and blocks new ones
// while it runs. Only Dir is pruned, never a shared store; a layer of Dir
// that a language's stack uses on a shared store's lower layers is kept.
//
// Preconditions: root, or the user namespace that mounted the roots, to
// unmount stale roots.
func (s *Store) Prune(ctx context.Context) (Pruned, error) {
	var res Pruned
	dir, err := s.dir()
	if err != nil {
		return res, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err := mkdirAll(filepath.Join(dir, locksDir)); err != nil {
		return res, err
	}
	unlock, err := lockWait(ctx, filepath.Join(dir, locksDir, storeLock), false, func() {
		s.log().Info("waiting for builds to finish before pruning")
	})
	if err != nil {
		return res, fmt.Errorf("lock store: %w", err)
	}
	defer unlock()

	// What the catalogue uses: every recipe key of every language's chain
	// that can be resolved, and the layers they point at.
	liveKeys := map[string]bool{}
	liveIDs := map[string]bool{}
	skel := skeletonRecipe().key()
	liveKeys[skel] = true
	if ref, ok, err := s.lookupRecipe(skel); err != nil {
		return res, err
	} else if ok {
		liveIDs[ref.hex] = true
	}
	for _, l := range usedLayers() {
		specs, err := chain(l)
		if err != nil {
			return res, err
		}
		var lower []string
		for _, spec := range specs {
			key := spec.recipe(lower).key()
			liveKeys[key] = true
			ref, ok, err := s.lookupRecipe(key)
			if err != nil {
				return res, err
			}
			if !ok {
				break
			}
			liveIDs[ref.hex] = true
			lower = append([]string{ref.id()}, lower...)
		}
	}

	var errs []error
	res.Roots, err = s.removeRoots(s.liveRoots())
	errs = append(errs, err)

	// No build runs (we hold the store lock): every temporary build is
	// left by a dead builder, and no one waits on a recipe lock.
	for _, sub := range []string{tmpDir, recipesDir, aptCacheDir} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			name := e.Name()
			var stale bool
			switch sub {
			case tmpDir, aptCacheDir: // apt's files shared by builds: fetched again by the next
				stale = true
			case recipesDir:
				stale = !liveKeys[name]
			}
			if !stale {
				continue
			}
			p := filepath.Join(dir, sub, name)
			if err := removeTree(p); err != nil {
				errs = append(errs, err)
				continue
			}
			res.Other = append(res.Other, filepath.Join(sub, name))
		}
	}

	removed, err := removeStaleLocks(filepath.Join(dir, locksDir))
	res.Other = append(res.Other, removed...)
	errs = append(errs, err)

	entries, err := os.ReadDir(filepath.Join(dir, layersDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		name := e.Name()
		if !hexRE().MatchString(name) || liveIDs[name] {
			continue
		}
		m, _ := readManifest(layerRef{hex: name, store: dir})
		if err := removeTree(filepath.Join(dir, layersDir, name)); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Layers = append(res.Layers, "sha256:"+name)
		res.Bytes += m.Bytes
		s.log().Info("pruned layer", "id", "sha256:"+name, "kind", m.Kind, "language", m.Language, "bytes", m.Bytes)
	}

	// Image layers no imported image uses.
	errs = append(errs, s.pruneImageLayers(&res))

	// Store format 1 kept its layers in Dir/layers/<name>.
	home, err := s.home()
	if err != nil {
		return res, err
	}
	old := filepath.Join(home, layersDir)
	entries, err = os.ReadDir(old)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		p := filepath.Join(old, e.Name())
		if !oldFormatEntry(p, e.Name()) {
			continue
		}
		if err := removeTree(p); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Other = append(res.Other, p)
		s.log().Info("pruned layer of the previous store format", "path", p)
	}
	return res, errors.Join(errs...)
}

// removeStaleLocks removes the lock files in dir that no one holds: a
// lock file lives only while it is held (tryLockMode), but sandcells
// before issue #37 left one for every image, layer, root and install ever
// used. Each is taken first, so one that a build, import, mount or
// install holds stays, and its holder removes it.
func removeStaleLocks(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".lock") || !e.Type().IsRegular() {
			continue
		}
		unlock, ok, err := tryLock(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			unlock() // removes it
			removed = append(removed, filepath.Join(locksDir, e.Name()))
		}
	}
	return removed, errors.Join(errs...)
}

// oldFormatEntry recognises what store format 1 kept in its directory,
// /var/lib/sandcell/layers by default: <name>/root with
// <name>/manifest.json, <name>.lock, and .build-<name>-<random>.
func oldFormatEntry(p, name string) bool {
	if base, ok := strings.CutSuffix(name, ".lock"); ok && nameRE().MatchString(base) {
		return true
	}
	if strings.HasPrefix(name, ".build-") {
		return true
	}
	if !nameRE().MatchString(name) {
		return false
	}
	_, err1 := os.Stat(filepath.Join(p, "root"))
	_, err2 := os.Stat(filepath.Join(p, manifestName))
	return err1 == nil && err2 == nil
}

// Verify re-hashes every layer of the language's stack (in Dir or a shared
// store) and compares it with the hash recorded at build time. A modified
// layer is an error wrapping ErrModified that names the layer.
func (s *Store) Verify(ctx context.Context, lang Language) error {
	if lang.Image != "" {
		return s.VerifyImage(ctx, lang.Image)
	}
	st, err := s.resolve(lang)
	if err != nil {
		return err
	}
	for _, l := range st.layers {
		if _, err := s.verifyLayer(ctx, l); err != nil {
			return err
		}
	}
	return nil
}

// VerifyLayer re-hashes one layer (by id, as in Manifest.ID), in Dir or a
// shared store, and compares it with its manifest. It returns the
// manifest; a mismatch is an error wrapping ErrModified.
//
// In a user namespace that does not map the owners of the layer's files
// (rootless sandcell checking a root-built shared layer: they look owned
// by nobody), the owners cannot be checked: VerifyLayer compares the
// owner-free TreeHash.Content instead, and fails without ErrModified for a
// layer whose manifest predates it. A layer built in such a namespace
// records the owners it saw there (root for its own files), so it verifies
// there, and not from the host, where its files belong to the user.
func (s *Store) VerifyLayer(ctx context.Context, id string) (Manifest, error) {
	h := hexID(id)
	if !hexRE().MatchString(h) {
		return Manifest{}, fmt.Errorf("layer id %q: not sha256:<64 hex digits>", id)
	}
	l, err := s.findLayer(h)
	if err != nil {
		return Manifest{}, err
	}
	return s.verifyLayer(ctx, l)
}

func (s *Store) verifyLayer(ctx context.Context, l layerRef) (Manifest, error) {
	m, err := readManifest(l)
	if err != nil {
		return Manifest{}, err
	}
	what := m.Kind
	if m.Language != "" {
		what = m.Language
	}
	got, sc, err := hashTreeIn(ctx, l.root(), currentNS(), m.OpenModes)
	if err != nil {
		return m, fmt.Errorf("%s layer %.19s: %w", what, m.ID, err)
	}
	if m.HostClosed && sc.open > 0 {
		return m, fmt.Errorf("%s layer %.19s: %w: %d entries are writable by other host users again (a local user may have planted files)",
			what, m.ID, ErrModified, sc.open)
	}
	unmapped := sc.unmapped
	want, have := m.Tree.Digest, got.Digest
	if unmapped > 0 {
		if m.Tree.Content == "" {
			return m, fmt.Errorf("%s layer %.19s: cannot verify it in this user namespace: it does not map the owners of %d of its files, "+
				"and the layer was built before sandcell recorded a digest without owners (verify it as root)", what, m.ID, unmapped)
		}
		want, have = m.Tree.Content, got.Content
		s.log().Debug("verified layer without its owners", "layer", what, "id", m.ID, "unmapped", unmapped)
	}
	if have != want {
		fix := "run: sandcell rootfs prune, then build it again"
		if dir, _ := s.dir(); l.store != dir {
			fix = "it is in a shared store: ask its owner to prune and build it again"
		}
		return m, fmt.Errorf("%s layer %.19s: %w: tree hash %s, built as %s (%d entries now, %d then; %s)",
			what, m.ID, ErrModified, have, want, got.Entries, m.Tree.Entries, fix)
	}
	return m, nil
}
