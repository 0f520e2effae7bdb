package rootfs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// Store is a directory of built language layers.
//
// Layout (manifest format 1):
//
//	Dir/<name>/root/            the layer: a complete root filesystem, never modified once built
//	Dir/<name>/manifest.json    what the layer was built from (Manifest)
//	Dir/<name>.lock             flock(2) lock serialising builds of <name>
//	Dir/.build-<name>-<random>  a build in progress, or one left by a killed build (see Clean)
//
// A layer directory appears only by rename(2) of a finished build, so if
// Dir/<name> exists it is complete. Callers get paths only from Root, which
// resolves symlinks within Dir: a later format can make Dir/<name> a symlink
// to a content-addressed directory named by Manifest.ID without changing
// callers.
//
// The zero Store is not usable: Dir must be set. Methods may be called
// concurrently, also from several processes sharing Dir.
type Store struct {
	// Dir is the store directory, e.g. /var/lib/sandcell/layers. Build
	// creates it (and missing parents) with mode 0755. Sandboxes that run in
	// a user namespace must be able to traverse Dir and all its parents.
	Dir string

	// Mirrors are passed to mmdebstrap as its MIRROR arguments: a URI, a
	// one-line "deb ..." entry, or the path of a sources.list file (deb822
	// .sources files work too). Empty means mmdebstrap's default,
	// http://deb.debian.org/debian plus the security and updates archives
	// for a stable suite. mmdebstrap does not read the host's apt sources.
	Mirrors []string

	// Logger receives build progress. Nil discards.
	Logger *slog.Logger
}

// Manifest describes a built layer. It is stored as Dir/<name>/manifest.json.
type Manifest struct {
	// Format is the store's layout and build-recipe version (manifestFormat).
	Format int `json:"format"`
	// Language is the name the layer was built for.
	Language string `json:"language"`
	// ID identifies the layer's content: "sha256:" and the hash of Format,
	// Suite, Packages and Setup. Equal IDs mean equal layers.
	ID string `json:"id"`
	// Suite is the Debian suite the packages came from.
	Suite string `json:"suite"`
	// Packages are the packages extracted into the layer, dependencies
	// included, sorted by name.
	Packages []Package `json:"packages"`
	// Setup are the build steps run in the layer (Language.Setup).
	Setup [][]string `json:"setup"`
	// Built is when the build finished.
	Built time.Time `json:"built"`
	// BuildSeconds is how long the build took.
	BuildSeconds float64 `json:"build_seconds"`
	// Bytes is the apparent size of the layer's regular files.
	Bytes int64 `json:"bytes"`
}

// Package is one Debian package in a layer.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch"`
}

const (
	// manifestFormat changes whenever the layout or the way layers are
	// finished (skeleton, removed files, permissions) changes.
	manifestFormat = 1
	buildPrefix    = ".build-"
	manifestName   = "manifest.json"
)

// Root returns the absolute path of the language's layer: a complete root
// filesystem to be used read-only, already holding every mountpoint
// (Mountpoints) and /etc/passwd and /etc/group naming the sandbox user. If
// the layer is missing, the error wraps ErrNotBuilt and says how to build it.
func (s *Store) Root(lang Language) (string, error) {
	p, err := s.path(lang, "root")
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", notBuilt(lang)
	}
	if err != nil {
		return "", fmt.Errorf("%s layer: %w", lang.Name, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s layer: root is not a directory", lang.Name)
	}
	return p, nil
}

// Manifest returns the manifest of the language's built layer. If the layer
// is missing, the error wraps ErrNotBuilt.
func (s *Store) Manifest(lang Language) (Manifest, error) {
	p, err := s.path(lang, manifestName)
	if err != nil {
		return Manifest{}, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, notBuilt(lang)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("%s layer: %w", lang.Name, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("%s layer: manifest: %w", lang.Name, err)
	}
	return m, nil
}

// Build builds the language's layer unless it is already built. Concurrent
// builds of one language, in this process or others, wait for each other
// and build once. Cancelling ctx stops the build (mmdebstrap and setup steps
// are killed) and removes its temporary directory.
//
// Preconditions: running as root (mmdebstrap's root mode and chroot(2)),
// mmdebstrap installed, the Debian mirror reachable.
func (s *Store) Build(ctx context.Context, lang Language) (err error) {
	if err := lang.check(); err != nil {
		return fmt.Errorf("language %q: %w", lang.Name, err)
	}
	if _, err := s.Root(lang); !errors.Is(err, ErrNotBuilt) {
		return err // built already, or a real error
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("building the %s layer needs root (mmdebstrap root mode and chroot)", lang.Name)
	}
	dir, err := s.dir()
	if err != nil {
		return err
	}
	if err := mkdirAll(dir); err != nil {
		return fmt.Errorf("create store: %w", err)
	}
	s.warnUntraversable(dir)

	unlock, err := lockWait(ctx, filepath.Join(dir, lang.Name+".lock"), func() {
		s.log().Info("waiting for another build", "language", lang.Name)
	})
	if err != nil {
		return fmt.Errorf("lock %s layer: %w", lang.Name, err)
	}
	defer unlock()
	if _, err := s.Root(lang); !errors.Is(err, ErrNotBuilt) {
		return err // another builder finished while we waited
	}

	tmp, err := os.MkdirTemp(dir, buildPrefix+lang.Name+"-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rmErr := removeTree(tmp); rmErr != nil {
				s.log().Error("remove failed build", "language", lang.Name, "dir", tmp, "err", rmErr)
			}
		}
	}()
	// MkdirTemp makes 0700; the renamed layer must be traversable.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}

	start := time.Now()
	s.log().Info("building layer", "language", lang.Name, "packages", lang.Packages, "suite", cat.Suite)
	m, err := s.build(ctx, lang, tmp)
	if err != nil {
		return fmt.Errorf("build %s layer: %w", lang.Name, err)
	}
	m.Built = time.Now().UTC()
	m.BuildSeconds = m.Built.Sub(start).Round(time.Millisecond).Seconds()
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, manifestName), append(data, '\n'), 0o644); err != nil {
		return err
	}
	// Make the layer durable before it gets its name, so a crash cannot
	// leave a complete-looking but truncated layer.
	if err := syncfs(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, lang.Name)); err != nil {
		return err
	}
	s.log().Info("layer built", "language", lang.Name, "id", m.ID, "bytes", m.Bytes,
		"packages", len(m.Packages), "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// Clean removes temporary directories left in Dir by killed builds. A build
// in progress (its lock held, also by another process) is left alone.
// Built layers and lock files are never touched. A missing Dir is clean.
func (s *Store) Clean() error {
	dir, err := s.dir()
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), buildPrefix)
		i := strings.LastIndexByte(rest, '-')
		if !ok || !e.IsDir() || i < 0 || !nameRE.MatchString(rest[:i]) {
			continue
		}
		name, p := rest[:i], filepath.Join(dir, e.Name())
		unlock, locked, err := tryLock(filepath.Join(dir, name+".lock"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !locked {
			s.log().Info("build in progress, not cleaning", "language", name, "dir", p)
			continue
		}
		err = removeTree(p)
		unlock()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.log().Info("removed stale build", "language", name, "dir", p)
	}
	return errors.Join(errs...)
}

// dir returns the absolute store directory.
func (s *Store) dir() (string, error) {
	if s.Dir == "" {
		return "", errors.New("rootfs: Store.Dir is not set")
	}
	return filepath.Abs(s.Dir)
}

// path returns Dir/<lang.Name>/<name>, resolving any symlinks within Dir.
func (s *Store) path(lang Language, name string) (string, error) {
	if !nameRE.MatchString(lang.Name) {
		return "", fmt.Errorf("%w %q", ErrUnknownLanguage, lang.Name)
	}
	dir, err := s.dir()
	if err != nil {
		return "", err
	}
	return securejoin.SecureJoin(dir, lang.Name+"/"+name)
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
	return fmt.Errorf("%s: %w (run: sandcell build %s)", lang.Name, ErrNotBuilt, lang.Name)
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
