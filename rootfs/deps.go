package rootfs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Installer is a package manager of the catalogue (languages.json,
// "installers"): the layer that holds it, stacked on its language's layers
// and used only by installs (a run's root stays small), and how it
// installs a requirement set into a dependency layer.
//
// An install runs Install in a sandbox of the installer's root with
// network mode egress (only the allowlisted hosts, through sandcell's
// proxy) and DepsDir writable; what it leaves in DepsDir becomes the
// dependency layer, which runs of Language then see read-only at DepsDir
// with RunEnv set.
type Installer struct {
	// Name names the installer's layer, e.g. "python-pip"; it must match
	// nameRE and differ from every language name.
	Name string `json:"name"`
	// Language is the language whose programs use what it installs.
	Language string `json:"language"`
	// Packages, Setup, Links and Trim are the layer's recipe, as a
	// Language's.
	Packages []string          `json:"packages"`
	Setup    [][]string        `json:"setup,omitempty"`
	Links    map[string]string `json:"links,omitempty"`
	Trim     []string          `json:"trim,omitempty"`
	// Install is the argv that installs; "{index}" in it is replaced by
	// the index URL, and the normalised requirements are appended after
	// a "--"-free list (each was checked not to start with "-").
	Install []string `json:"install"`
	// Insecure are arguments added after Install's own when the index
	// URL is plain http ("{host}": the index's host), e.g. pip's
	// --trusted-host.
	Insecure []string `json:"insecure,omitempty"`
	// Index is the default index or registry URL (the operator may set
	// another, see cmd/sandcell's --deps-index).
	Index string `json:"index"`
	// Allow are the host:port pairs the index needs by default (the
	// operator may set others).
	Allow []string `json:"allow"`
	// Names is how requirement names compare: "pep503" (case-insensitive,
	// runs of -_. equal) or "npm" (case-sensitive).
	Names string `json:"names"`
	// Env is extra environment of the install; RunEnv that of runs that
	// mount the dependency layer (e.g. PYTHONPATH=/tmp/deps).
	Env    []string `json:"env,omitempty"`
	RunEnv []string `json:"run_env"`
}

// DepsDir is where a dependency layer is mounted in a sandbox. It lies
// in /tmp (a mountpoint of every root): a layer's root is read-only, so
// the runtime cannot create a new top-level directory for it.
const DepsDir = "/tmp/deps"

// check reports the first thing wrong with an installer entry.
func (i Installer) check(c catalogue) error {
	if !nameRE().MatchString(i.Name) {
		return fmt.Errorf("name must match %s", nameRE())
	}
	if slices.ContainsFunc(c.Languages, func(l Language) bool { return l.Name == i.Name || slices.Contains(l.Aliases, i.Name) }) {
		return fmt.Errorf("name is a language's")
	}
	if !slices.ContainsFunc(c.Languages, func(l Language) bool { return l.Name == i.Language }) {
		return fmt.Errorf("language %q is not in the catalogue", i.Language)
	}
	if len(i.Packages) == 0 {
		return fmt.Errorf("no packages")
	}
	if len(i.Install) == 0 || !path.IsAbs(i.Install[0]) {
		return fmt.Errorf("install must be an argv with an absolute program path")
	}
	if _, err := ParseIndex(i.Index); err != nil {
		return err
	}
	if i.Names != "pep503" && i.Names != "npm" {
		return fmt.Errorf("names must be pep503 or npm")
	}
	for _, e := range append(slices.Clone(i.Env), i.RunEnv...) {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("env %q is not KEY=value", e)
		}
	}
	return checkRecipe(i.Packages, i.Setup, i.Links, i.Trim)
}

// Layer is the installer's layer as a language of its own, stacked on its
// language (Extends), for Store.Build, Root and Status. It runs the
// language's programs the same way.
func (i Installer) Layer() Language {
	base, _ := lookup(i.Language)
	l := base.clone()
	l.Name, l.Aliases, l.Extends = i.Name, nil, i.Language
	l.Packages, l.Setup, l.Links, l.Trim = slices.Clone(i.Packages), cloneArgvs(i.Setup), nil, slices.Clone(i.Trim)
	if len(i.Links) > 0 {
		l.Links = make(map[string]string, len(i.Links))
		for k, v := range i.Links {
			l.Links[k] = v
		}
	}
	return l
}

// usedLayers are every language whose layers the catalogue uses: its
// languages, their installers' layers and their wasm variants' (Prune
// keeps them).
func usedLayers() []Language {
	return append(append(slices.Clone(cat().Languages), installerLayers()...), wasmLayers()...)
}

// installerLayers are the installers' layers (for Prune: they are used).
func installerLayers() []Language {
	out := make([]Language, len(cat().Installers))
	for n, i := range cat().Installers {
		out[n] = i.Layer()
	}
	return out
}

// Installers returns the catalogue's installers, in catalogue order.
func Installers() []Installer {
	out := make([]Installer, len(cat().Installers))
	for n, i := range cat().Installers {
		out[n] = i.clone()
	}
	return out
}

// InstallerFor returns the installer of a language (by name or alias, or
// the installer's own name). The error wraps ErrNoInstaller.
func InstallerFor(name string) (Installer, error) {
	k := strings.ToLower(strings.TrimSpace(name))
	if l, ok := lookup(k); ok {
		k = l.Name
	}
	for _, i := range cat().Installers {
		if i.Language == k || i.Name == k {
			return i.clone(), nil
		}
	}
	var have []string
	for _, i := range cat().Installers {
		have = append(have, i.Language)
	}
	return Installer{}, fmt.Errorf("%w for %q (installs work for: %s)", ErrNoInstaller, name, strings.Join(have, ", "))
}

func (i Installer) clone() Installer {
	c := i
	c.Packages, c.Setup, c.Trim = slices.Clone(i.Packages), cloneArgvs(i.Setup), slices.Clone(i.Trim)
	c.Install, c.Insecure, c.Allow = slices.Clone(i.Install), slices.Clone(i.Insecure), slices.Clone(i.Allow)
	c.Env, c.RunEnv = slices.Clone(i.Env), slices.Clone(i.RunEnv)
	if i.Links != nil {
		c.Links = make(map[string]string, len(i.Links))
		for k, v := range i.Links {
			c.Links[k] = v
		}
	}
	return c
}

// ParseIndex checks an index or registry URL: http or https, a host, no
// user info, query or fragment.
func ParseIndex(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("index %q must be an http or https URL with a host and no user, query or fragment", raw)
	}
	return u, nil
}

// Argv is the install command for reqs (normalised) from index.
func (i Installer) Argv(index string, reqs []string) ([]string, error) {
	u, err := ParseIndex(index)
	if err != nil {
		return nil, err
	}
	argv := make([]string, 0, len(i.Install)+len(i.Insecure)+len(reqs))
	for _, a := range i.Install {
		argv = append(argv, strings.ReplaceAll(a, "{index}", index))
	}
	if u.Scheme == "http" {
		for _, a := range i.Insecure {
			argv = append(argv, strings.ReplaceAll(a, "{host}", u.Hostname()))
		}
	}
	return append(argv, reqs...), nil
}

// Requirement syntax. Only names from the index, with version
// constraints: no URLs, paths, VCS specs or options (a requirement
// starting with "-" would be an option of the package manager, e.g.
// pip's --index-url pointing elsewhere or npm's --script-shell).
var (
	pepRE       = lazyRE(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(\[[A-Za-z0-9._,-]+\])?((?:(?:===|==|~=|!=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+,?)*)$`)
	pepSepRE    = lazyRE(`[-_.]+`)
	npmRE       = lazyRE(`^((?:@[A-Za-z0-9][A-Za-z0-9._~-]*/)?[A-Za-z0-9][A-Za-z0-9._~-]*)(?:@([A-Za-z0-9.^~<>=*|+_-]+))?$`)
	maxRequires = 64
)

// NormaliseRequirements checks reqs and returns them in their canonical
// form, sorted and without repeats, so that the same set in any order or
// spelling makes the same dependency layer: PEP 503 names are lower-cased
// with runs of "-_." made "-" (extras too); npm names keep their case
// (npm's registry is case-sensitive). Version constraints are kept as
// given (an exact pin stays exact); spaces are removed. The error wraps
// ErrInvalidRequirement.
func (i Installer) NormaliseRequirements(reqs []string) ([]string, error) {
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no packages given", ErrInvalidRequirement)
	}
	if len(reqs) > maxRequires {
		return nil, fmt.Errorf("%w: %d packages, at most %d", ErrInvalidRequirement, len(reqs), maxRequires)
	}
	byName := map[string]string{}
	for _, unsafeReq := range reqs {
		r := strings.Join(strings.Fields(unsafeReq), "")
		if r == "" || len(r) > 200 {
			return nil, fmt.Errorf("%w: %q must be a package name with an optional version, at most 200 characters", ErrInvalidRequirement, truncateReq(unsafeReq))
		}
		var name, norm string
		switch i.Names {
		case "pep503":
			m := pepRE().FindStringSubmatch(r)
			if m == nil {
				return nil, fmt.Errorf("%w: %q is not a package name with optional [extras] and version constraints (e.g. requests==2.31.0); URLs, paths and options are refused", ErrInvalidRequirement, truncateReq(unsafeReq))
			}
			name = strings.ToLower(pepSepRE().ReplaceAllString(m[1], "-"))
			norm = name
			if m[2] != "" {
				var extras []string
				for _, e := range strings.Split(strings.Trim(m[2], "[]"), ",") {
					if e != "" {
						extras = append(extras, strings.ToLower(pepSepRE().ReplaceAllString(e, "-")))
					}
				}
				slices.Sort(extras)
				norm += "[" + strings.Join(slices.Compact(extras), ",") + "]"
			}
			norm += strings.TrimSuffix(m[3], ",")
		case "npm":
			m := npmRE().FindStringSubmatch(r)
			if m == nil {
				return nil, fmt.Errorf("%w: %q is not an npm package name with an optional version (e.g. lodash@4.17.21); URLs, paths, git specs and options are refused", ErrInvalidRequirement, truncateReq(unsafeReq))
			}
			name, norm = m[1], m[1]
			if m[2] != "" {
				norm += "@" + m[2]
			}
		}
		if prev, ok := byName[name]; ok && prev != norm {
			return nil, fmt.Errorf("%w: %s is asked twice (%s and %s)", ErrInvalidRequirement, name, prev, norm)
		}
		byName[name] = norm
	}
	out := make([]string, 0, len(byName))
	for _, n := range byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// RequirementName is the package name of a normalised requirement.
func (i Installer) RequirementName(req string) string {
	if i.Names == "npm" {
		if at := strings.LastIndexByte(req, '@'); at > 0 {
			return req[:at]
		}
		return req
	}
	if end := strings.IndexAny(req, "[=<>!~"); end >= 0 {
		return req[:end]
	}
	return req
}

func truncateReq(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// DepManifest describes a dependency layer; it is stored next to it.
type DepManifest struct {
	// Key identifies the layer: the hash of the fields below it up to
	// Requirements.
	Key string `json:"key"`
	// Installer and Language name who installed it and for whom.
	Installer string `json:"installer"`
	Language  string `json:"language"`
	// LayerID is the language's stack (Store.StackID) the packages were
	// installed for: compiled extensions match its interpreter.
	LayerID string `json:"layer_id"`
	// Index is the index or registry URL they came from.
	Index string `json:"index"`
	// Requirements is the normalised requirement set.
	Requirements []string `json:"requirements"`
	// Bytes and Files are the layer's size; Created and InstallMS when
	// and how long it took.
	Bytes     int64     `json:"bytes"`
	Files     int       `json:"files"`
	Created   time.Time `json:"created"`
	InstallMS int64     `json:"install_ms"`
}

// DepKey is the key of the dependency layer of reqs (normalised) installed
// by inst from index for the language stack layerID.
func DepKey(layerID string, inst Installer, index string, reqs []string) string {
	b, _ := json.Marshal(struct {
		Format    int      `json:"format"`
		LayerID   string   `json:"layer_id"`
		Installer string   `json:"installer"`
		Index     string   `json:"index"`
		Reqs      []string `json:"requirements"`
	}{1, layerID, inst.Name, index, reqs})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// StackID identifies the layers of lang's root (its layers' ids hashed):
// "sha256:..." The language must be built.
func (s *Store) StackID(lang Language) (string, error) {
	st, err := s.resolve(lang)
	if err != nil {
		return "", err
	}
	ids := make([]string, len(st.layers))
	for i, l := range st.layers {
		ids[i] = l.hex
	}
	sum := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

const (
	depsDir    = "deps"
	depsFormat = 1
)

// Dependency returns the root directory and manifest of the dependency
// layer with key, from Dir or a shared store, and whether there is one.
//
// Layout: S/deps/<key>/root/ (never written once there) and
// S/deps/<key>/manifest.json; it appears by rename(2) of a finished
// install.
func (s *Store) Dependency(key string) (string, DepManifest, bool, error) {
	if !hexRE().MatchString(key) {
		return "", DepManifest{}, false, fmt.Errorf("dependency key %q is not 64 hex digits", key)
	}
	stores, err := s.stores()
	if err != nil {
		return "", DepManifest{}, false, err
	}
	for _, st := range stores {
		dir := filepath.Join(st, depsDir, key)
		data, err := os.ReadFile(filepath.Join(dir, manifestName))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", DepManifest{}, false, err
		}
		var m DepManifest
		if err := json.Unmarshal(data, &m); err != nil || m.Key != key {
			return "", DepManifest{}, false, fmt.Errorf("dependency layer %s: bad manifest", key)
		}
		return filepath.Join(dir, "root"), m, true, nil
	}
	return "", DepManifest{}, false, nil
}

// DepInstall is one install for InstallDependency.
type DepInstall struct {
	// Manifest names the layer (Key and the fields it hashes); the rest
	// is filled in.
	Manifest DepManifest
	// MaxBytes caps the layer (the size of the tmpfs the installer
	// writes to); MaxFiles its entries (0: 200000).
	MaxBytes int64
	MaxFiles int
	// UID and GID own the empty directory handed to Run (the sandbox
	// user's host ids).
	UID, GID uint32
	// Run installs into dir, a fresh size-capped tmpfs (mounted by the
	// caller's sandbox at DepsDir). What it leaves there is untrusted.
	Run func(ctx context.Context, dir string) error
}

// InstallDependency returns the dependency layer named by in.Manifest.Key,
// installing it first if it is not there: one installer per key at a time
// (flock; a second caller waits and then finds it). cached says it was
// there already. The installed tree is copied from the tmpfs onto disk
// without following a link, keeping only directories, regular files and
// symlinks, owned by root, world-readable, without setuid or setgid bits
// (what the installer wrote is untrusted: the package manager ran
// packages' code), then renamed into place.
func (s *Store) InstallDependency(ctx context.Context, in DepInstall) (root string, m DepManifest, cached bool, err error) {
	key := in.Manifest.Key
	if root, m, ok, err := s.Dependency(key); err != nil || ok {
		return root, m, ok, err
	}
	dir, err := s.dir()
	if err != nil {
		return "", DepManifest{}, false, err
	}
	for _, d := range []string{dir, filepath.Join(dir, locksDir), filepath.Join(dir, tmpDir), filepath.Join(dir, depsDir)} {
		if err := mkdirAll(d); err != nil {
			return "", DepManifest{}, false, err
		}
	}
	// Prune empties tmp/ under the store lock: hold it shared, as builds do.
	unlockStore, err := lockWait(ctx, filepath.Join(dir, locksDir, storeLock), true, nil)
	if err != nil {
		return "", DepManifest{}, false, fmt.Errorf("lock store: %w", err)
	}
	defer unlockStore()
	unlock, err := lockWait(ctx, filepath.Join(dir, locksDir, "deps-"+key+".lock"), false, func() {
		s.log().Info("waiting for another install of the same dependencies", "key", key)
	})
	if err != nil {
		return "", DepManifest{}, false, fmt.Errorf("lock dependency layer: %w", err)
	}
	defer unlock()
	if root, m, ok, err := s.Dependency(key); err != nil || ok {
		return root, m, ok, err
	}

	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", DepManifest{}, false, err
	}
	tmp := filepath.Join(dir, tmpDir, "deps-"+key[:16]+"-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(tmp, 0o711); err != nil {
		return "", DepManifest{}, false, err
	}
	defer func() {
		if err := removeTree(tmp); err != nil {
			s.log().Warn("remove install directory", "dir", tmp, "err", err)
		}
	}()
	stage := filepath.Join(tmp, "stage")
	if err := os.Mkdir(stage, 0o700); err != nil {
		return "", DepManifest{}, false, err
	}
	maxFiles := in.MaxFiles
	if maxFiles <= 0 {
		maxFiles = 200000
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755,uid=%d,gid=%d", in.MaxBytes, maxFiles+16, in.UID, in.GID)
	if err := unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", DepManifest{}, false, fmt.Errorf("mount install tmpfs: %w", err)
	}
	defer unix.Unmount(stage, unix.MNT_DETACH) //nolint:errcheck // also unmounted below on success
	start := time.Now()
	if err := in.Run(ctx, stage); err != nil {
		return "", DepManifest{}, false, err
	}
	layer := filepath.Join(tmp, "layer")
	if err := os.Mkdir(layer, 0o755); err != nil {
		return "", DepManifest{}, false, err
	}
	out := filepath.Join(layer, "root")
	bytes, files, err := copyUntrusted(stage, out, in.MaxBytes, maxFiles)
	if err != nil {
		return "", DepManifest{}, false, fmt.Errorf("copy the installed files: %w", err)
	}
	if err := unix.Unmount(stage, unix.MNT_DETACH); err != nil {
		return "", DepManifest{}, false, fmt.Errorf("unmount install tmpfs: %w", err)
	}
	m = in.Manifest
	m.Bytes, m.Files, m.Created, m.InstallMS = bytes, files, time.Now().UTC(), time.Since(start).Milliseconds()
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", DepManifest{}, false, err
	}
	if err := os.WriteFile(filepath.Join(layer, manifestName), append(data, '\n'), 0o644); err != nil {
		return "", DepManifest{}, false, err
	}
	if err := syncfs(layer); err != nil {
		return "", DepManifest{}, false, err
	}
	final := filepath.Join(dir, depsDir, key)
	if err := os.Rename(layer, final); err != nil {
		return "", DepManifest{}, false, err
	}
	s.log().Info("dependency layer installed", "key", key, "language", m.Language, "requirements", m.Requirements, "bytes", m.Bytes, "install_ms", m.InstallMS)
	return filepath.Join(final, "root"), m, false, nil
}

// copyUntrusted copies the tree at src (written by a sandboxed program,
// now dead) to dst, a new directory. Entries are opened through os.Root
// with O_NOFOLLOW, so a planted symlink is copied as a link, never
// followed onto the host (CVE-2024-28185: Judge0 followed a symlink its
// sandbox planted). FIFOs, sockets and devices are skipped. maxBytes
// caps the apparent size copied: a sparse file costs the tmpfs nothing
// but would be written out in full.
func copyUntrusted(src, dst string, maxBytes int64, maxFiles int) (bytes int64, files int, err error) {
	from, err := os.OpenRoot(src)
	if err != nil {
		return 0, 0, err
	}
	defer from.Close()
	if err := os.Mkdir(dst, 0o755); err != nil {
		return 0, 0, err
	}
	to, err := os.OpenRoot(dst)
	if err != nil {
		return 0, 0, err
	}
	defer to.Close()
	err = fs.WalkDir(from.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if files++; files > maxFiles {
			return fmt.Errorf("more than %d files", maxFiles)
		}
		switch t := d.Type(); {
		case t.IsDir():
			return to.Mkdir(p, 0o755)
		case t&fs.ModeSymlink != 0:
			target, err := from.Readlink(p)
			if err != nil {
				return err
			}
			return to.Symlink(target, p)
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if bytes+info.Size() > maxBytes {
				return fmt.Errorf("the installed files take more than %d bytes", maxBytes)
			}
			mode := fs.FileMode(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			n, err := copyFile(from, to, p, mode)
			bytes += n
			return err
		default:
			files--
			return nil
		}
	})
	return bytes, files, err
}

func copyFile(from, to *os.Root, p string, mode fs.FileMode) (int64, error) {
	in, err := from.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := to.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// Deps lists the dependency layers of Dir (not of shared stores).
func (s *Store) Deps() ([]DepManifest, error) {
	dir, err := s.dir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(dir, depsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []DepManifest
	for _, e := range entries {
		if _, m, ok, err := s.Dependency(e.Name()); err == nil && ok {
			out = append(out, m)
		}
	}
	return out, nil
}
