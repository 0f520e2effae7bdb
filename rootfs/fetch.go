package rootfs

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// downloadsDir holds the registry tarballs that layers take files from
// (Fetch), named by their SHA-512: a build finds them there and needs no
// network, and an operator of an offline host can put them there by hand.
const downloadsDir = "downloads"

// Caps on a fetched tarball, so that a wrong pin or a broken registry
// cannot fill the disk or memory: its size, its entries, what is
// extracted.
const (
	maxFetchBytes   = 512 << 20
	maxFetchEntries = 100000
)

// npmSpecRE is an exact npm package version: "name@1.2.3" or
// "@scope/name@1.2.3" (no ranges, tags or URLs: the pin is the version
// and the integrity hash).
var npmSpecRE = lazyRE(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*@[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// check reports the first thing wrong with a fetch entry.
func (f Fetch) check() error {
	if !npmSpecRE().MatchString(f.NPM) {
		return errors.New(`npm must be an exact "name@version"`)
	}
	if _, err := f.sum(); err != nil {
		return err
	}
	if len(f.Files) == 0 {
		return errors.New("no files")
	}
	for from, to := range f.Files {
		if !validLayerPath(from) || !validLayerPath(to) {
			return fmt.Errorf("file %q -> %q: paths must be clean and relative", from, to)
		}
	}
	return nil
}

// sum is the SHA-512 the integrity names.
func (f Fetch) sum() ([]byte, error) {
	b64, ok := strings.CutPrefix(f.Integrity, "sha512-")
	sum, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(sum) != sha512.Size {
		return nil, errors.New(`integrity must be "sha512-" and a base64 SHA-512 (npm view NAME@VERSION dist.integrity)`)
	}
	return sum, nil
}

// fetch writes the fetch entries' files into the layer tree at root.
func (s *Store) fetch(ctx context.Context, name string, fetches []Fetch, tmp, root string) error {
	for _, f := range fetches {
		t0 := time.Now()
		tgz, err := s.tarball(ctx, f, tmp)
		if err != nil {
			return fmt.Errorf("fetch %s: %w", f.NPM, err)
		}
		if err := extractFiles(tgz, f.Files, root); err != nil {
			return fmt.Errorf("fetch %s: %w", f.NPM, err)
		}
		s.log().Debug("fetched files", "layer", name, "package", f.NPM, "files", len(f.Files), "duration", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// tarball returns the path of f's tarball, checked against its integrity:
// the store's copy (or a shared store's), else one npm fetches now, which
// is kept in the store.
func (s *Store) tarball(ctx context.Context, f Fetch, tmp string) (string, error) {
	sum, err := f.sum()
	if err != nil {
		return "", err
	}
	file := hex.EncodeToString(sum) + ".tgz"
	stores, err := s.stores()
	if err != nil {
		return "", err
	}
	for _, store := range stores {
		p := filepath.Join(store, downloadsDir, file)
		if ok, err := hasSum(p, sum); err != nil {
			return "", err
		} else if ok {
			return p, nil
		}
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("the store has no copy of the tarball and npm is not installed (apt-get install npm); "+
			"on an offline host, run `npm pack %s` where the registry is reachable and put the file at %s",
			f.NPM, filepath.Join(stores[0], downloadsDir, file))
	}
	dir := filepath.Join(tmp, "npm")
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o700); err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	cmd := exec.CommandContext(ctx, npm, "pack", "--silent", "--pack-destination", filepath.Join(dir, "out"), "--cache", filepath.Join(dir, "cache"), f.NPM)
	// Not the caller's npm settings (a registry, a token): only the
	// default registry, and the pin decides what is accepted.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false"}
	if err := s.run(ctx, cmd); err != nil {
		return "", fmt.Errorf("npm pack: %w (on an offline host, put the tarball at %s)", err, filepath.Join(stores[0], downloadsDir, file))
	}
	got, _ := filepath.Glob(filepath.Join(dir, "out", "*.tgz"))
	if len(got) != 1 {
		return "", fmt.Errorf("npm pack left %d tarballs", len(got))
	}
	if ok, err := hasSum(got[0], sum); err != nil {
		return "", err
	} else if !ok {
		return "", fmt.Errorf("the tarball npm fetched does not have the pinned integrity %s", f.Integrity)
	}
	keep := filepath.Join(stores[0], downloadsDir)
	if err := mkdirAll(keep); err != nil {
		return "", err
	}
	if err := os.Rename(got[0], filepath.Join(keep, file)); err != nil {
		return "", err
	}
	return filepath.Join(keep, file), nil
}

// hasSum reports whether the file at p exists and has SHA-512 sum.
func hasSum(p string, sum []byte) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha512.New()
	n, err := io.Copy(h, io.LimitReader(f, maxFetchBytes+1))
	if err != nil {
		return false, err
	}
	return n <= maxFetchBytes && slices.Equal(h.Sum(nil), sum), nil
}

// extractFiles writes the named regular files of the gzipped tarball tgz
// (checked already against its pin) to their paths in root, mode 0644,
// through an os.Root. Every file named must be there.
func extractFiles(tgz string, files map[string]string, root string) error {
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	tr := tar.NewReader(io.LimitReader(zr, 4*maxFetchBytes))
	left := len(files)
	for n := 0; left > 0; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if n >= maxFetchEntries {
			return fmt.Errorf("more than %d entries", maxFetchEntries)
		}
		to, ok := files[path.Clean(h.Name)]
		if !ok {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return fmt.Errorf("%s is not a regular file", h.Name)
		}
		if err := r.MkdirAll(path.Dir(to), 0o755); err != nil {
			return err
		}
		out, err := r.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, io.LimitReader(tr, maxFetchBytes))
		if err := errors.Join(err, out.Close()); err != nil {
			return err
		}
		left--
	}
	if left > 0 {
		var missing []string
		for from := range files {
			if _, err := r.Lstat(files[from]); err != nil {
				missing = append(missing, from)
			}
		}
		slices.Sort(missing)
		return fmt.Errorf("the tarball lacks %s", strings.Join(missing, ", "))
	}
	return nil
}
