package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultDir is the store directory: $SANDCELL_HOME if set, else
// /var/lib/sandcell.
func DefaultDir() string {
	if h := os.Getenv("SANDCELL_HOME"); h != "" {
		return h
	}
	return "/var/lib/sandcell"
}

// Store is a directory of layers and the language roots assembled from
// them, kept in the rootfs subdirectory of sandcell's home directory Dir.
//
// Layout (store format 2), S = Dir/rootfs:
//
//	S/layers/<hex>/root/           a layer: never modified once built
//	S/layers/<hex>/manifest.json   what it was built from (Manifest)
//	S/recipes/<key>                symlink to ../layers/<hex>: the layer built from recipe <key>
//	S/roots/<rootid>/              a language's read-only overlay, mounted once, shared by every run
//	S/locks/                       flock(2) files: store.lock (builds shared, Prune exclusive),
//	                               recipe-<key>.lock (one builder per recipe), root-<rootid>.lock;
//	                               an exclusive holder removes its file as it unlocks (tryLockMode)
//	S/tmp/<key>-<random>/          a build in progress, or one left by a killed build (see Clean)
//
// <hex> is a layer's content id (Manifest.ID without "sha256:"): the hash
// of its recipe and resolved package versions. A language's root stacks,
// top first: the skeleton layer (mountpoints, /etc/passwd...), its own
// layer, the layers of the language it extends, and the base layer; each
// holds only the files the layers below it lack. A layer directory appears
// only by rename(2) of a finished build and a recipe pointer only after
// its layer, so whatever the store names is complete.
//
// A store may also use, read-only, the layers of other stores (Shared): a
// rootless sandcell keeps its own store in the user's cache and takes the
// layers root built in /var/lib/sandcell. Everything written (roots,
// locks, builds) goes under Dir.
//
// The zero Store is not usable: Dir must be set. Methods may be called
// concurrently, also from several processes sharing Dir.
type Store struct {
	// Dir is sandcell's home directory, usually DefaultDir(); the store
	// keeps its files in Dir/rootfs. Build creates them (and missing
	// parents) with mode 0755. Sandboxes that run in a user namespace must
	// be able to traverse Dir and all its parents.
	Dir string

	// Shared are other sandcell home directories, like Dir, whose built
	// layers are used read-only, e.g. the root-built /var/lib/sandcell for
	// a rootless sandcell whose Dir is the user's. Each layer of a
	// language's stack is looked up by its recipe in Dir first, then in
	// Shared in order, so a root's lower directories may lie in shared
	// stores and Build builds in Dir only the layers none of them has
	// (stacked on theirs). Nothing is written to a shared store: roots are
	// mounted, locks taken and layers built under Dir, and Prune and Clean
	// touch Dir only. A shared layer that is incomplete (no readable
	// manifest) or unreadable is skipped, and logged once. If a shared
	// store prunes a layer that layers in Dir stack on, the language is
	// not built until Build builds the missing layers into Dir.
	Shared []string

	// Mirrors are passed to mmdebstrap as its MIRROR arguments: a URI, a
	// one-line "deb ..." entry, or the path of a sources.list file (deb822
	// .sources files work too). Empty means mmdebstrap's default,
	// http://deb.debian.org/debian plus the security and updates archives
	// for a stable suite. mmdebstrap does not read the host's apt sources.
	Mirrors []string

	// Logger receives build progress. Nil discards.
	Logger *slog.Logger

	// mu guards roots, the roots this Store mounted or found mounted, and
	// warned, the problems with shared stores already logged.
	mu     sync.Mutex
	roots  map[string]cachedRoot // by language name
	warned map[string]bool
}

// cachedRoot is a root Root found mounted: later calls check that the same
// mount is still there with one stat(2) instead of reading the mount table.
type cachedRoot struct {
	lang  Language // the value Root was called with (its recipe fields count)
	point string
	dev   uint64 // st_dev of the overlay's root directory
}

const (
	storeDir     = "rootfs"
	layersDir    = "layers"
	recipesDir   = "recipes"
	rootsDir     = "roots"
	locksDir     = "locks"
	tmpDir       = "tmp"
	manifestName = "manifest.json"
	storeLock    = "store.lock"
)

// hexRE is a layer's directory name or a recipe key.
var hexRE = lazyRE(`^[0-9a-f]{64}$`)

// hexID strips "sha256:" from a layer id.
func hexID(id string) string { return strings.TrimPrefix(id, "sha256:") }

// Progress reports how a Build goes, for a progress bar or log lines.
type Progress struct {
	// Language is the language Build was asked for.
	Language string `json:"language"`
	// Layer is the layer being built: "skeleton", "base" or a language.
	Layer string `json:"layer"`
	// Step is "wait" (for another builder), "extract" (download and unpack
	// packages; the longest), "setup", "finish", "hash" or "done".
	Step string `json:"step"`
	// Done of Total steps are finished; Total is fixed for one Build.
	Done  int `json:"done"`
	Total int `json:"total"`
}

// stepsPerLayer are the steps a package layer reports: extract, setup,
// finish, hash, done.
const stepsPerLayer = 5

// Root returns the absolute path of the language's root filesystem, ready
// to be the read-only root of a sandbox: a read-only overlay of its layers
// (skeleton, language, base) that already holds every mountpoint
// (Mountpoints) and /etc/passwd and /etc/group naming the sandbox user.
//
// The overlay is mounted once, at Dir/rootfs/roots/<rootid>, and shared by every
// run of the language (and by every process using the store); later calls
// find it in this thread's mount table and only return its path. Its
// layers may come from shared stores (Shared); its mount point is always
// under Dir, even when a shared store's server has the same root mounted.
// If a layer is missing, the error wraps ErrNotBuilt and says how to build
// it.
//
// Preconditions: root, or root of a user namespace that owns this
// process's mount namespace (rootless sandcell), to mount the overlay the
// first time.
func (s *Store) Root(lang Language) (string, error) {
	if point, ok := s.cachedRoot(lang); ok {
		return point, nil
	}
	st, err := s.resolve(lang)
	if err != nil {
		return "", err
	}
	if err := s.closeLayers(st); err != nil {
		return "", fmt.Errorf("%s root: %w", lang.Name, err)
	}
	return s.mountStack(lang, st)
}

// mountStack returns the mount point of st's overlay, mounting it unless
// it is mounted, and caches it under lang (see cachedRoot).
func (s *Store) mountStack(lang Language, st stack) (string, error) {
	point, err := s.rootPoint(st)
	if err != nil {
		return "", err
	}
	mounts, err := readMountinfo()
	if err != nil {
		return "", err
	}
	if m, ok := mountedAt(mounts, point); ok {
		if !isSandcellRoot(m) {
			return "", fmt.Errorf("%s root: %s has a %s mount that sandcell did not make", lang.Name, point, m.fstype)
		}
	} else if err := s.mountRoot(lang, st, point); err != nil {
		return "", err
	}
	s.remember(lang, point)
	return point, nil
}

// cachedRoot returns lang's root if this Store found it mounted before and
// the same mount is still there: the overlay's root directory has the
// device number it had then. (Unmounted, the directory shows the store's
// file system instead; mounted again, a new overlay gets a new anonymous
// device.) Layers rebuilt by another process since are not noticed until
// the old root is unmounted (Prune, Unmount, Close): the old root is
// complete and keeps working.
func (s *Store) cachedRoot(lang Language) (string, bool) {
	s.mu.Lock()
	c, ok := s.roots[lang.Name]
	s.mu.Unlock()
	if !ok || !sameRecipe(c.lang, lang) {
		return "", false
	}
	var st unix.Stat_t
	if err := unix.Stat(c.point, &st); err != nil || st.Dev != c.dev {
		s.forget(lang.Name)
		return "", false
	}
	return c.point, true
}

// remember caches lang's root at point (see cachedRoot).
func (s *Store) remember(lang Language, point string) {
	var st unix.Stat_t
	if err := unix.Stat(point, &st); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roots == nil {
		s.roots = map[string]cachedRoot{}
	}
	s.roots[lang.Name] = cachedRoot{lang: lang.clone(), point: point, dev: st.Dev}
}

func (s *Store) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == "" {
		clear(s.roots)
	}
	delete(s.roots, name)
}

// sameRecipe reports whether a and b build the same layers.
func sameRecipe(a, b Language) bool {
	return a.Name == b.Name && a.Image == b.Image && a.Extends == b.Extends && slices.Equal(a.Packages, b.Packages) &&
		slices.EqualFunc(a.Setup, b.Setup, slices.Equal) && maps.Equal(a.Links, b.Links) && slices.Equal(a.Trim, b.Trim) &&
		slices.EqualFunc(a.Fetch, b.Fetch, func(x, y Fetch) bool {
			return x.NPM == y.NPM && x.Integrity == y.Integrity && maps.Equal(x.Files, y.Files)
		})
}

// stack is a language's resolved layers.
type stack struct {
	// layers are top first: skeleton, language, ..., base.
	layers []layerRef
}

// layerRef is a built layer: the hex digits of its id and the store (the
// rootfs directory of Dir or of a shared store) that holds it.
type layerRef struct {
	hex   string
	store string
}

// id is the layer's id, as in Manifest.ID.
func (r layerRef) id() string { return "sha256:" + r.hex }

// root is the layer's root directory.
func (r layerRef) root() string { return filepath.Join(r.store, layersDir, r.hex, "root") }

// rootID names the overlay of the stack: the hash of its layer ids. The
// same layers from another store make the same root.
func (st stack) rootID() string {
	ids := make([]string, len(st.layers))
	for i, l := range st.layers {
		ids[i] = l.hex
	}
	sum := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return hex.EncodeToString(sum[:16])
}

// resolve finds the layers of lang's stack through the recipe pointers,
// without building or mounting anything.
func (s *Store) resolve(lang Language) (stack, error) {
	if !nameRE().MatchString(lang.Name) {
		return stack{}, fmt.Errorf("%w %q", ErrUnknownLanguage, lang.Name)
	}
	if lang.Image != "" {
		return s.languageImage(lang)
	}
	specs, err := chain(lang)
	if err != nil {
		return stack{}, err
	}
	var lower []string // "sha256:" ids, top first
	var refs []layerRef
	for _, spec := range specs {
		ref, ok, err := s.lookupRecipe(spec.recipe(lower).key())
		if err != nil {
			return stack{}, fmt.Errorf("%s layer: %w", spec.name, err)
		}
		if !ok {
			return stack{}, notBuilt(lang)
		}
		lower = append([]string{ref.id()}, lower...)
		refs = append([]layerRef{ref}, refs...)
	}
	skel, ok, err := s.lookupRecipe(skeletonRecipe().key())
	if err != nil {
		return stack{}, fmt.Errorf("skeleton layer: %w", err)
	}
	if !ok {
		return stack{}, notBuilt(lang)
	}
	return stack{layers: append([]layerRef{skel}, refs...)}, nil
}

// lookupRecipe returns the layer built from the recipe with the given key,
// and whether there is one: Dir's, else the first shared store's that is
// usable.
func (s *Store) lookupRecipe(key string) (layerRef, bool, error) {
	stores, err := s.stores()
	if err != nil {
		return layerRef{}, false, err
	}
	for i, store := range stores {
		shared := i > 0
		ref, ok, err := lookupRecipeIn(store, key, shared)
		if err != nil && shared {
			s.warnShared(store, err)
			continue
		}
		if err != nil || ok {
			return ref, ok, err
		}
	}
	return layerRef{}, false, nil
}

// lookupRecipeIn looks the recipe key up in one store. In a shared store,
// which another user may have built or copied by hand, the layer must also
// have a readable manifest naming it and a root directory this process can
// read: overlayfs needs both read and search permission on a lower.
func lookupRecipeIn(store, key string, shared bool) (layerRef, bool, error) {
	target, err := os.Readlink(filepath.Join(store, recipesDir, key))
	if errors.Is(err, fs.ErrNotExist) {
		return layerRef{}, false, nil
	}
	if err != nil {
		return layerRef{}, false, err
	}
	h := filepath.Base(target)
	if target != "../"+layersDir+"/"+h || !hexRE().MatchString(h) {
		return layerRef{}, false, fmt.Errorf("recipe pointer %s: unexpected target %q", key, target)
	}
	ref := layerRef{hex: h, store: store}
	if _, err := os.Stat(ref.root()); errors.Is(err, fs.ErrNotExist) {
		return layerRef{}, false, nil // pruned or removed by hand
	} else if err != nil {
		return layerRef{}, false, err
	}
	if shared {
		if _, err := readManifest(ref); err != nil {
			return layerRef{}, false, err
		}
		if err := unix.Access(ref.root(), unix.R_OK|unix.X_OK); err != nil {
			return layerRef{}, false, fmt.Errorf("layer %.12s: %w", h, err)
		}
	}
	return ref, true, nil
}

// findLayer returns the layer with the given hex id: Dir's, else the first
// shared store's. It does not check a shared layer as lookupRecipe does:
// callers got the id from a manifest or a recipe.
func (s *Store) findLayer(h string) (layerRef, error) {
	stores, err := s.stores()
	if err != nil {
		return layerRef{}, err
	}
	for i, store := range stores {
		ref := layerRef{hex: h, store: store}
		_, err := os.Stat(ref.root())
		if err == nil {
			return ref, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if i == 0 {
			return layerRef{}, err
		}
		s.warnShared(store, err)
	}
	return layerRef{}, fmt.Errorf("layer %.12s: %w", h, fs.ErrNotExist)
}

// stores returns the rootfs directories layers are looked up in, absolute:
// Dir's first, then the shared stores' in order, without repeats.
func (s *Store) stores() ([]string, error) {
	dir, err := s.dir()
	if err != nil {
		return nil, err
	}
	out := []string{dir}
	for _, home := range s.Shared {
		if home == "" {
			continue
		}
		abs, err := filepath.Abs(home)
		if err != nil {
			return nil, err
		}
		if d := filepath.Join(abs, storeDir); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// warnShared logs, once per store and problem, that a shared store's layer
// or listing was skipped.
func (s *Store) warnShared(store string, err error) {
	key := store + "\x00" + err.Error()
	s.mu.Lock()
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	first := !s.warned[key]
	s.warned[key] = true
	s.mu.Unlock()
	if first {
		s.log().Warn("skipping unusable layer of a shared store", "store", store, "err", err)
	}
}

// rootPoint is where the stack's overlay is mounted, symlinks in Dir
// resolved (the mount table shows resolved paths).
func (s *Store) rootPoint(st stack) (string, error) {
	dir, err := s.dir()
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return filepath.Join(dir, rootsDir, st.rootID()), nil
}

// mountRoot mounts st's overlay at point unless another caller (in this
// process or another) did meanwhile.
func (s *Store) mountRoot(lang Language, st stack, point string) error {
	dir, err := s.dir()
	if err != nil {
		return err
	}
	if err := mkdirAll(filepath.Join(dir, locksDir)); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	unlock, err := lockWait(ctx, filepath.Join(dir, locksDir, "root-"+st.rootID()+".lock"), false, nil)
	if err != nil {
		return fmt.Errorf("%s root: lock: %w", lang.Name, err)
	}
	defer unlock()
	mounts, err := readMountinfo()
	if err != nil {
		return err
	}
	if m, ok := mountedAt(mounts, point); ok {
		if !isSandcellRoot(m) {
			return fmt.Errorf("%s root: %s has a %s mount that sandcell did not make", lang.Name, point, m.fstype)
		}
		return nil
	}
	if err := mkdirAll(point); err != nil {
		return err
	}
	lowers := make([]string, len(st.layers))
	for i, l := range st.layers {
		lowers[i] = l.root()
		if real, err := filepath.EvalSymlinks(lowers[i]); err == nil {
			lowers[i] = real
		}
	}
	if err := mountOverlay(point, lowers); err != nil {
		return fmt.Errorf("%s root: %w", lang.Name, err)
	}
	s.log().Info("mounted language root", "language", lang.Name, "root", point, "layers", len(lowers))
	return nil
}

// Unmount detaches the language's root if it is mounted. Sandboxes running
// on it keep their copy; the next Root mounts it again.
func (s *Store) Unmount(lang Language) error {
	st, err := s.resolve(lang)
	if errors.Is(err, ErrNotBuilt) {
		return nil
	}
	if err != nil {
		return err
	}
	point, err := s.rootPoint(st)
	if err != nil {
		return err
	}
	s.forget(lang.Name)
	return s.unmountRoot(point)
}

// unmountRoot detaches every sandcell overlay at point and removes the
// mountpoint directory.
func (s *Store) unmountRoot(point string) error {
	for {
		mounts, err := readMountinfo()
		if err != nil {
			return err
		}
		m, ok := mountedAt(mounts, point)
		if !ok {
			break
		}
		if !isSandcellRoot(m) {
			return fmt.Errorf("%s has a %s mount that sandcell did not make: not unmounting it", point, m.fstype)
		}
		if err := unmount(point); err != nil {
			return err
		}
	}
	if err := os.Remove(point); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Close detaches every language root of the store. Sandboxes running on
// them keep their copies. The store stays usable: Root mounts again.
func (s *Store) Close() error {
	s.forget("")
	points, err := s.mountedRoots()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		errs = append(errs, s.unmountRoot(p))
	}
	return errors.Join(errs...)
}

// mountedRoots lists the mount points of sandcell overlays under
// Dir/rootfs/roots.
func (s *Store) mountedRoots() ([]string, error) {
	dir, err := s.dir()
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	prefix := filepath.Join(dir, rootsDir) + "/"
	var points []string
	for _, m := range mounts {
		if strings.HasPrefix(m.point, prefix) && !strings.Contains(m.point[len(prefix):], "/") &&
			isSandcellRoot(m) && !slices.Contains(points, m.point) {
			points = append(points, m.point)
		}
	}
	return points, nil
}

// Built reports whether every layer of the language is built, without
// mounting anything.
func (s *Store) Built(lang Language) (bool, error) {
	_, err := s.resolve(lang)
	if errors.Is(err, ErrNotBuilt) {
		return false, nil
	}
	return err == nil, err
}

// Manifest returns the manifest of the language's own layer. If a layer of
// its stack is missing, the error wraps ErrNotBuilt.
func (s *Store) Manifest(lang Language) (Manifest, error) {
	st, err := s.resolve(lang)
	if err != nil {
		return Manifest{}, err
	}
	return readManifest(st.layers[1])
}

// Layers returns the manifests of the language's stack, top first:
// skeleton, the language's layer, those of the languages it extends, base.
func (s *Store) Layers(lang Language) ([]Manifest, error) {
	st, err := s.resolve(lang)
	if err != nil {
		return nil, err
	}
	ms := make([]Manifest, len(st.layers))
	for i, l := range st.layers {
		if ms[i], err = readManifest(l); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

// List returns the manifests of every layer in the store and its shared
// stores (a layer in several, once), whether a language uses it or not
// (Prune removes from Dir those none uses), sorted by kind and language.
func (s *Store) List() ([]Manifest, error) {
	stores, err := s.stores()
	if err != nil {
		return nil, err
	}
	var ms []Manifest
	seen := map[string]bool{}
	for i, store := range stores {
		entries, err := os.ReadDir(filepath.Join(store, layersDir))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil && i > 0 {
			s.warnShared(store, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !hexRE().MatchString(e.Name()) || seen[e.Name()] {
				continue
			}
			m, err := readManifest(layerRef{hex: e.Name(), store: store})
			if err != nil && i > 0 {
				s.warnShared(store, err)
				continue
			}
			if err != nil {
				return nil, err
			}
			seen[e.Name()] = true
			ms = append(ms, m)
		}
	}
	order := map[string]int{KindSkeleton: 0, KindBase: 1, KindLanguage: 2}
	slices.SortFunc(ms, func(a, b Manifest) int {
		if c := order[a.Kind] - order[b.Kind]; c != 0 {
			return c
		}
		if c := strings.Compare(a.Language, b.Language); c != 0 {
			return c
		}
		return a.Built.Compare(b.Built)
	})
	return ms, nil
}

// readManifest reads the layer's manifest.json.
func readManifest(l layerRef) (Manifest, error) {
	h := l.hex
	data, err := os.ReadFile(filepath.Join(l.store, layersDir, h, manifestName))
	if err != nil {
		return Manifest{}, fmt.Errorf("layer %.12s: %w", h, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("layer %.12s: manifest: %w", h, err)
	}
	if hexID(m.ID) != h {
		return Manifest{}, fmt.Errorf("layer %.12s: manifest names layer %s", h, m.ID)
	}
	return m, nil
}

// layerRoot is the root directory of layer h: in Dir, else in the first
// shared store that has it (see findLayer), else where Dir would hold it.
func (s *Store) layerRoot(h string) string {
	if ref, err := s.findLayer(h); err == nil {
		return ref.root()
	}
	dir, _ := s.dir()
	return filepath.Join(dir, layersDir, h, "root")
}

// dir returns the absolute directory the store keeps its files in,
// Dir/rootfs.
func (s *Store) dir() (string, error) {
	home, err := s.home()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, storeDir), nil
}

// home returns the absolute Dir.
func (s *Store) home() (string, error) {
	if s.Dir == "" {
		return "", errors.New("rootfs: Store.Dir is not set")
	}
	return filepath.Abs(s.Dir)
}

func (s *Store) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// warnUntraversable logs each ancestor of dir that other users cannot
// traverse: a sandbox's root in a user namespace is such an "other" user,
// and runc cannot mount a layer it cannot reach.
func (s *Store) warnUntraversable(dir string) {
	for p := dir; ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
			s.log().Warn("store path not traversable by other users; sandboxes in a user namespace cannot reach layers",
				"dir", p, "mode", fi.Mode().Perm().String())
		}
		if p == filepath.Dir(p) {
			return
		}
	}
}

func notBuilt(lang Language) error {
	return fmt.Errorf("%s: %w (run: sandcell rootfs build %s)", lang.Name, ErrNotBuilt, lang.Name)
}

// mkdirAll is os.MkdirAll with mode 0755 whatever the umask, so that the
// directories it creates are traversable from a sandbox.
func mkdirAll(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s: not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return os.Chmod(dir, 0o755)
}

// Status is a catalogue language as the store has it: what `sandcell rootfs
// list`, `sandcell languages` and the MCP list_languages tool show.
type Status struct {
	Language string   `json:"language"`
	Aliases  []string `json:"aliases"`
	Compiled bool     `json:"compiled"`
	Built    bool     `json:"built"`
	// Wasm: the catalogue also offers the language under isolation wasm.
	Wasm bool `json:"wasm"`
	// Package is the language's main Debian package (Language.VersionOf,
	// else its first) and Version the version its layers were built with,
	// e.g. python3 3.11.2-1+b1: the interpreter's or compiler's, not a
	// library's. Version is empty when not built.
	Package string `json:"package"`
	Version string `json:"version,omitempty"`
	// Layer is the id of the language's own layer, Bytes its size and
	// StackBytes the size of all its layers (the base and, for an
	// extending language, the layers it extends included).
	Layer      string  `json:"layer,omitempty"`
	Bytes      int64   `json:"bytes,omitempty"`
	StackBytes int64   `json:"stack_bytes,omitempty"`
	BuildSecs  float64 `json:"build_seconds,omitempty"`
	// BuiltAt is when the language's own layer was built.
	BuiltAt time.Time `json:"built_at,omitzero"`
	// Image is the imported image that is the language's root (Language.Image);
	// Built then says it is imported and Layer is its config digest.
	Image string `json:"image,omitempty"`
}

// Status reports lang's state in the store, without building or mounting
// anything. A language that is not built is not an error.
func (s *Store) Status(lang Language) (Status, error) {
	st := Status{Language: lang.Name, Aliases: slices.Clone(lang.Aliases), Compiled: lang.Compiled(), Wasm: lang.OffersWasm()}
	if len(lang.Packages) > 0 {
		st.Package = lang.Packages[0]
	}
	if lang.VersionOf != "" {
		st.Package = lang.VersionOf
	}
	if lang.Image != "" {
		return s.imageStatus(lang, st)
	}
	stack, err := s.Layers(lang)
	if errors.Is(err, ErrNotBuilt) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	own := stack[1]
	st.Built = true
	// The package is in the language's own layer, or (VersionOf) in a
	// layer of the language it extends.
	for _, m := range append([]Manifest{own}, stack...) {
		if st.Version = m.PackageVersion(st.Package); st.Version != "" {
			break
		}
	}
	st.Layer, st.Bytes, st.BuildSecs, st.BuiltAt = own.ID, own.Bytes, own.BuildSeconds, own.Built
	for _, m := range stack {
		st.StackBytes += m.Bytes
	}
	return st, nil
}
