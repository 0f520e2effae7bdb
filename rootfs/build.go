package rootfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// listHook is an mmdebstrap --extract-hook. It runs on the host after the
// packages are extracted and before mmdebstrap deletes the downloaded .debs,
// and writes one "name TAB version TAB arch" line per package to the file
// named by $SANDCELL_PACKAGE_LIST. (The extract variant installs nothing, so
// the layer's dpkg status database stays empty and cannot be asked.) If
// $SANDCELL_OWNER_LIST is set, it also appends there the packages' file
// lists with numeric owners (tar -tv, names C-quoted; see squashedOwners).
// With $SANDCELL_DEB_LIST set it reads the .deb files from that list (what
// apt installed, aptDebListOpt) rather than every file in apt's archives,
// which hold the shared cache's files too (aptCacheInHook); no list is no
// package (apt installed none: the lower layers hold them all).
const listHook = `set -e; if [ -n "$SANDCELL_DEB_LIST" ]; then debs=$(cat "$SANDCELL_DEB_LIST" 2>/dev/null || true); else debs=$(ls "$1"/var/cache/apt/archives/*.deb); fi; ` +
	`echo "$debs" | while IFS= read -r f; do [ -n "$f" ] || continue; ` +
	`dpkg-deb --show --showformat='${Package}\t${Version}\t${Architecture}\n' "$f"; ` +
	`if [ -n "$SANDCELL_OWNER_LIST" ]; then ` +
	`dpkg-deb --fsys-tarfile "$f" | tar -t -v --numeric-owner --quoting-style=c >> "$SANDCELL_OWNER_LIST"; fi; ` +
	`done > "$SANDCELL_PACKAGE_LIST"`

// lowerStatusInHook is an mmdebstrap --setup-hook that gives apt the
// packages of the layers below as installed ($SANDCELL_DPKG_STATUS, made
// by lowerStatus): apt then downloads and mmdebstrap extracts only the
// packages the layer adds, not again the whole closure its lowers hold
// (kotlin's build unpacked the JDK again, fortran's all of GCC; issue #42).
// The finished tree is the same: what a lower holds was subtracted before.
// lowerStatusOutHook empties the status again before the layer is
// finished: the base's empty status file is what the stack shows.
const (
	lowerStatusInHook  = `set -e; mkdir -p "$1"/var/lib/dpkg; cp "$SANDCELL_DPKG_STATUS" "$1"/var/lib/dpkg/status`
	lowerStatusOutHook = `set -e; : > "$1"/var/lib/dpkg/status`
)

// lowerStatus is a dpkg status file that lists pkgs (lowerPackages) as
// installed: each package's control fields from its .deb in the
// shared archives (debs), as in the suite's index. apt takes an installed
// package for the index's version only if the fields it hashes (Depends,
// Installed-Size...) are the same; a package whose .deb is not there is
// left out, and apt installs it into the layer again, as before.
func lowerStatus(ctx context.Context, pkgs []Package, debs string) ([]byte, error) {
	var b bytes.Buffer
	for _, p := range pkgs {
		deb := filepath.Join(debs, p.Name+"_"+strings.ReplaceAll(p.Version, ":", "%3a")+"_"+p.Arch+".deb")
		if _, err := os.Stat(deb); err != nil {
			continue
		}
		control, err := exec.CommandContext(ctx, "dpkg-deb", "--field", deb).Output()
		if err != nil {
			return nil, fmt.Errorf("control fields of %s: %w", deb, err)
		}
		b.Write(withoutProvides(bytes.TrimRight(control, "\n")))
		b.WriteString("\nStatus: install ok installed\n\n")
	}
	return b.Bytes(), nil
}

// withoutProvides drops the Provides field (and its continuation lines)
// from control fields. An installed package that provides a virtual one
// would satisfy a dependency on it, where the build without the lowers'
// status installed the dependency's first alternative: groovy's
// "default-jre-headless | java8-runtime-headless" took the JDK below as the
// runtime and left out default-jre-headless, whose /usr/lib/jvm/default-java
// groovy's script runs. Without Provides, apt resolves as before and at
// worst installs a lower package again into the layer.
func withoutProvides(control []byte) []byte {
	var out [][]byte
	skip := false
	for _, line := range bytes.Split(control, []byte("\n")) {
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			if !skip {
				out = append(out, line)
			}
			continue
		}
		skip = bytes.HasPrefix(line, []byte("Provides:"))
		if !skip {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// lowerPackages are the packages of the layers lower (ids, top first), the
// top-most of a name and architecture kept.
func (s *Store) lowerPackages(lower []string) ([]Package, error) {
	var out []Package
	seen := map[string]bool{}
	for _, id := range lower {
		ref, err := s.findLayer(hexID(id))
		if err != nil {
			return nil, fmt.Errorf("lower layer %.19s: %w", id, err)
		}
		m, err := readManifest(ref)
		if err != nil {
			return nil, err
		}
		for _, p := range m.Packages {
			if k := p.Name + ":" + p.Arch; !seen[k] {
				seen[k] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// aptDebListOpt is an apt option (mmdebstrap --aptopt) that writes the
// .deb files apt installs, one path a line, to path, as mmdebstrap's own
// Pre-Install-Pkgs hook reads them. The option lands in the target's
// /etc/apt, which finishPackages removes. path must be shellSafe.
func aptDebListOpt(path string) string {
	return `DPkg::Pre-Install-Pkgs:: "cat > '` + path + `'";`
}

// shellSafe reports whether p can stand in single quotes in a shell
// command within an apt configuration string.
func shellSafe(p string) bool {
	return p != "" && strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._+-") == ""
}

// setupEnv is the whole environment of a setup step.
var setupEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LC_ALL=C",
	"HOME=/",
}

// layerBuilds counts layer builds in this process (tests check that
// concurrent builders build once).
var layerBuilds atomic.Int64

// buildLayer builds the layer of recipe r (whose Lower are the ids of the
// layers below it, top first) into a fresh directory under tmp/, moves it
// to layers/<hex> and returns its manifest. If a layer with the same id is
// there already (the same content built under another recipe), the new
// build is dropped.
func (s *Store) buildLayer(ctx context.Context, name string, r recipe, emit func(step string)) (m Manifest, err error) {
	layerBuilds.Add(1)
	start := time.Now()
	var times buildTimes
	t := start
	tmp, err := s.newBuildDir(r.key())
	if err != nil {
		return Manifest{}, err
	}
	defer func() {
		if err != nil {
			if rmErr := removeTree(tmp); rmErr != nil {
				s.log().Error("remove failed build", "layer", name, "dir", tmp, "err", rmErr)
			}
		}
	}()
	root := filepath.Join(tmp, "root")

	var pkgs []Package
	var owners map[string]string // path in the layer -> "uid:gid" its package gives it, if not root's
	var squashed []string
	var open map[string]string // closed entries' modes as built (Manifest.OpenModes)
	if r.Kind == KindSkeleton {
		if err := writeSkeleton(root); err != nil {
			return Manifest{}, fmt.Errorf("skeleton: %w", err)
		}
	} else {
		emit("extract")
		if len(r.Packages) > 0 {
			if pkgs, owners, err = s.extract(ctx, name, r, tmp, root, &times); err != nil {
				return Manifest{}, err
			}
			t = time.Now()
		} else if err := os.Mkdir(root, 0o755); err != nil {
			return Manifest{}, err
		}
		if err := s.fetch(ctx, name, r.Fetch, tmp, root); err != nil {
			return Manifest{}, err
		}
		if err := makeLinks(root, r.Links); err != nil {
			return Manifest{}, err
		}
		if len(r.Fetch) > 0 {
			t = times.since("fetch", t)
		}
		emit("setup")
		for _, argv := range r.Setup {
			if err := s.setup(ctx, name, root, argv); err != nil {
				return Manifest{}, err
			}
		}
		if len(r.Setup) > 0 {
			t = times.since("setup", t)
		}
		emit("finish")
		if open, err = s.finish(ctx, name, r, root); err != nil {
			return Manifest{}, err
		}
		if squashed, err = squashedOwners(root, owners); err != nil {
			return Manifest{}, err
		}
		if len(squashed) > 0 {
			s.log().Info("package owners not kept: the user namespace maps one id", "layer", name, "entries", squashed)
		}
		t = times.since("finish", t)
	}
	emit("hash")
	m, err = s.commitLayer(ctx, name, r, pkgs, squashed, open, tmp, start)
	if err == nil {
		times.since("commit", t)
		s.log().Info("layer build phases", append([]any{"layer", name}, times.attrs()...)...)
	}
	return m, err
}

// newBuildDir makes a fresh, traversable build directory tmp/<key>-<random>.
func (s *Store) newBuildDir(key string) (string, error) {
	dir, err := s.dir()
	if err != nil {
		return "", err
	}
	if err := mkdirAll(filepath.Join(dir, tmpDir)); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Join(dir, tmpDir), key+"-")
	if err != nil {
		return "", err
	}
	// MkdirTemp makes 0700; the renamed layer must be traversable.
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// commitLayer closes the finished layer tree tmp/root to other host users
// (closeTree; open: the modes of the entries closed before, as finish
// does), hashes it as built, writes its manifest and moves tmp to
// layers/<hex>. The caller removes tmp on error.
func (s *Store) commitLayer(ctx context.Context, name string, r recipe, pkgs []Package, squashed []string, open map[string]string, tmp string, start time.Time) (Manifest, error) {
	dir, err := s.dir()
	if err != nil {
		return Manifest{}, err
	}
	closed, err := closeTree(filepath.Join(tmp, "root"))
	if err != nil {
		return Manifest{}, fmt.Errorf("close layer to other host users: %w", err)
	}
	for p, mode := range open {
		closed[p] = mode
	}
	if open, err = keepExisting(filepath.Join(tmp, "root"), closed); err != nil {
		return Manifest{}, err
	}
	tree, _, err := hashTreeIn(ctx, filepath.Join(tmp, "root"), currentNS(), open)
	if err != nil {
		return Manifest{}, fmt.Errorf("hash layer: %w", err)
	}
	m := Manifest{
		Format:         storeFormat,
		ID:             layerID(r, pkgs, squashed),
		Kind:           r.Kind,
		Recipe:         r.key(),
		Suite:          r.Suite,
		Packages:       pkgs,
		Setup:          r.Setup,
		Lower:          r.Lower,
		SquashedOwners: squashed,
		Tree:           tree,
		HostClosed:     true,
		OpenModes:      open,
		Bytes:          tree.Bytes,
	}
	if r.Kind == KindLanguage {
		m.Language = name
	}
	m.Built = time.Now().UTC()
	m.BuildSeconds = m.Built.Sub(start).Round(time.Millisecond).Seconds()
	// writeManifest syncs the file system first: the layer is durable
	// before it gets its name, so a crash cannot leave a complete-looking
	// but truncated layer.
	if err := writeManifest(tmp, m); err != nil {
		return Manifest{}, err
	}
	dest := filepath.Join(dir, layersDir, hexID(m.ID))
	if _, err := os.Lstat(dest); err == nil {
		s.log().Info("identical layer exists", "layer", name, "id", m.ID)
		if err := removeTree(tmp); err != nil {
			return Manifest{}, err
		}
		return readManifest(layerRef{hex: hexID(m.ID), store: dir})
	}
	if err := mkdirAll(filepath.Join(dir, layersDir)); err != nil {
		return Manifest{}, err
	}
	if err := os.Rename(tmp, dest); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// extract runs mmdebstrap's extract variant for r's packages into root and
// returns the packages it extracted.
//
// In a user namespace that maps one id (rootless sandcell, `unshare -r`),
// two things of a root build fail, and there, and only there, extract
// works around them:
//
//   - tar cannot give a file an owner other than root, the namespace's one
//     id (chown(2) fails with EINVAL: base-files' /var/local is
//     root:staff), and fails the build. tar extracts with --no-same-owner
//     (through $TAR_OPTIONS, which mmdebstrap passes on), so every file is
//     root's, and extract returns owners: the entries whose package gives
//     them another owner, "uid:gid" by path in the layer.
//   - mmdebstrap mounts a devpts with uid=5 on the target's /dev/pts (and
//     bind-mounts /dev nodes, /proc and /sys) for its hooks once the target
//     has a /dev; the kernel refuses the devpts (uid 5 is not mapped).
//     --skip=chroot/mount leaves them out: listHook runs outside the
//     target, and finishPackages removes /dev, /proc and /sys anyway.
//
// Everything else runs as in a root build (mmdebstrap's root mode as the
// namespace's root, setup steps chrooted): a layer whose packages own
// everything by root comes out identical, with the same id and, hashed in
// the namespace (where its files are root's), the same tree hash.
func (s *Store) extract(ctx context.Context, name string, r recipe, tmp, root string, times *buildTimes) ([]Package, map[string]string, error) {
	mmdebstrap, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return nil, nil, fmt.Errorf("%w (install it: apt-get install mmdebstrap)", err)
	}
	dir, err := s.dir()
	if err != nil {
		return nil, nil, err
	}
	cache, err := aptCacheFor(dir, r.Suite, s.Mirrors)
	if err != nil {
		return nil, nil, fmt.Errorf("apt cache: %w", err)
	}
	pkgs, owners, err := s.mmdebstrap(ctx, mmdebstrap, name, r, tmp, root, cache, times)
	if err != nil && cache.reuse && ctx.Err() == nil {
		// The indexes this process reused may be older than the mirror's
		// files (a point release removes the old versions): fetch them
		// again and build once more.
		s.log().Info("build with reused package indexes failed; fetching them again", "layer", name, "err", err)
		forgetLists(cache.lists)
		if rmErr := removeTree(root); rmErr != nil {
			return nil, nil, errors.Join(err, rmErr)
		}
		cache.reuse = false
		pkgs, owners, err = s.mmdebstrap(ctx, mmdebstrap, name, r, tmp, root, cache, times)
	}
	return pkgs, owners, err
}

// mmdebstrap is one run of extract's mmdebstrap, with the shared apt cache.
func (s *Store) mmdebstrap(ctx context.Context, mmdebstrap, name string, r recipe, tmp, root string, cache aptCache, times *buildTimes) ([]Package, map[string]string, error) {
	list := filepath.Join(tmp, "packages.tsv")
	ownerList := ""
	if currentNS().oneID() {
		ownerList = filepath.Join(tmp, "owners.txt")
	}
	args := []string{
		"--mode=root",
		"--variant=extract",
		"--format=directory",
		"--include=" + strings.Join(r.Packages, ","),
		"--extract-hook=" + listHook,
	}
	statusFile := ""
	var lowerPkgs []Package
	// A setup step runs chrooted in this layer's tree alone, so it needs
	// the whole closure there (the dynamic loader, libc): only a layer
	// without setup steps leaves its lowers' packages out.
	if len(r.Lower) > 0 && len(r.Setup) == 0 {
		var err error
		if lowerPkgs, err = s.lowerPackages(r.Lower); err != nil {
			return nil, nil, err
		}
		status, err := lowerStatus(ctx, lowerPkgs, cache.debs)
		if err != nil {
			return nil, nil, err
		}
		statusFile = filepath.Join(tmp, "lower.status")
		if err := os.WriteFile(statusFile, status, 0o644); err != nil {
			return nil, nil, err
		}
		args = append(args, "--setup-hook="+lowerStatusInHook, "--extract-hook="+lowerStatusOutHook)
	}
	debList := filepath.Join(tmp, "debs.list")
	if shellSafe(debList) && shellSafe(cache.debs) {
		args = append(args, "--aptopt="+aptDebListOpt(debList), "--setup-hook="+aptCacheInHook, "--extract-hook="+aptCacheOutHook)
	} else {
		debList = "" // no shared .deb files: listHook reads apt's archives
	}
	if ownerList != "" {
		args = append(args, "--skip=chroot/mount")
	}
	if cache.reuse {
		args = append(args, "--skip=update")
	}
	args = append(args, "--", r.Suite, root)
	cmd := exec.CommandContext(ctx, mmdebstrap, append(args, s.Mirrors...)...)
	// Not the caller's TAR_OPTIONS: extraction must not depend on them.
	cmd.Env = append(os.Environ(), "SANDCELL_PACKAGE_LIST="+list, "SANDCELL_OWNER_LIST=", "TAR_OPTIONS=",
		"SANDCELL_APT_DEBS="+cache.debs, "SANDCELL_APT_LISTS_IN=", "SANDCELL_APT_LISTS_OUT=", "SANDCELL_DEB_LIST="+debList, "SANDCELL_DPKG_STATUS="+statusFile)
	if cache.reuse {
		cmd.Env = append(cmd.Env, "SANDCELL_APT_LISTS_IN="+cache.lists)
	} else {
		cmd.Env = append(cmd.Env, "SANDCELL_APT_LISTS_OUT="+cache.lists)
	}
	if ownerList != "" {
		cmd.Env = append(cmd.Env, "SANDCELL_OWNER_LIST="+ownerList, "TAR_OPTIONS=--no-same-owner")
	}
	t0 := time.Now()
	clock := newPhaseClock(nil, times)
	if err := s.runWatched(ctx, cmd, clock); err != nil {
		return nil, nil, fmt.Errorf("mmdebstrap: %w", err)
	}
	clock.stop()
	if !cache.reuse {
		fetchedLists(cache.lists)
	}
	s.log().Debug("extracted packages", "layer", name, "duration", time.Since(t0).Round(time.Millisecond), "reused_indexes", cache.reuse)
	data, err := os.ReadFile(list)
	if err != nil {
		return nil, nil, fmt.Errorf("package list: %w", err)
	}
	pkgs, err := parsePackages(data)
	if len(data) == 0 && statusFile != "" {
		// Every package is in a lower layer already (sh's busybox-static
		// is the base's): the layer adds none.
		pkgs, err = nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("package list: %w", err)
	}
	// The layer's own packages that a lower holds are still its build's
	// (Status finds a language's version in its own manifest first).
	for _, name := range r.Packages {
		i := slices.IndexFunc(lowerPkgs, func(p Package) bool { return p.Name == name })
		if i >= 0 && !slices.ContainsFunc(pkgs, func(p Package) bool { return p.Name == name }) {
			pkgs = append(pkgs, lowerPkgs[i])
		}
	}
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	var owners map[string]string
	if ownerList != "" {
		data, err := os.ReadFile(ownerList)
		if err != nil {
			return nil, nil, fmt.Errorf("owner list: %w", err)
		}
		if owners, err = parseOwners(data); err != nil {
			return nil, nil, fmt.Errorf("owner list: %w", err)
		}
		if err := os.Remove(ownerList); err != nil {
			return nil, nil, err
		}
	}
	return pkgs, owners, os.Remove(list)
}

// parseOwners reads `tar -t -v --numeric-owner --quoting-style=c` output,
//
//	drwxrwsr-x 0/50              0 2023-03-12 12:00 "./var/local/"
//
// and returns the entries not owned by 0/0: "uid:gid" by clean path in the
// layer ("var/local").
func parseOwners(data []byte) (map[string]string, error) {
	owners := map[string]string{}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		q := strings.IndexByte(line, '"')
		if len(f) < 6 || q < 0 {
			return nil, fmt.Errorf("malformed line %q", strings.TrimSpace(line))
		}
		if f[1] == "0/0" {
			continue
		}
		quoted, err := strconv.QuotedPrefix(line[q:])
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", strings.TrimSpace(line), err)
		}
		name, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", strings.TrimSpace(line), err)
		}
		name = path.Clean(strings.TrimPrefix(name, "./"))
		if !validLayerPath(name) {
			continue // "." (the root), or nothing a layer holds
		}
		owners[name] = strings.Replace(f[1], "/", ":", 1)
	}
	return owners, nil
}

// squashedOwners returns the entries of owners still in the finished tree
// at dir (neither trimmed, removed nor held by a lower layer) as sorted
// "/path uid:gid" lines: where the layer differs from a root build.
func squashedOwners(dir string, owners map[string]string) ([]string, error) {
	if len(owners) == 0 {
		return nil, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var out []string
	for name, owner := range owners {
		_, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, "/"+name+" "+owner)
	}
	slices.Sort(out)
	return out, nil
}

// setup runs one setup step chrooted into root.
func (s *Store) setup(ctx context.Context, name, root string, argv []string) error {
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = setupEnv
	cmd.Dir = "/"
	// The layer's own programs run against the layer's own libraries.
	// Paths resolve inside the chroot, so no symlink in the layer can lead
	// a step's writes onto the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	if err := s.run(ctx, cmd); err != nil {
		return fmt.Errorf("setup step %q: %w", argv, err)
	}
	s.log().Debug("ran setup step", "layer", name, "argv", argv, "duration", time.Since(t0).Round(time.Millisecond))
	return nil
}

// finish trims, cleans, normalises and closes to other host users
// (closeTree) the extracted tree and removes what its lower layers already
// hold. It returns the closed entries' modes as built. Closing comes
// before subtracting: the lowers are closed too, so their /var/tmp
// matches this tree's and is not kept in it.
func (s *Store) finish(ctx context.Context, name string, r recipe, root string) (map[string]string, error) {
	t0 := time.Now()
	fsroot, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	n, err := trimTree(fsroot, r.Trim)
	fsroot.Close()
	if err != nil {
		return nil, fmt.Errorf("trim: %w", err)
	}
	if err := finishPackages(root); err != nil {
		return nil, fmt.Errorf("finish layer: %w", err)
	}
	open, err := closeTree(root)
	if err != nil {
		return nil, fmt.Errorf("close layer to other host users: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var removed, kept int
	if len(r.Lower) > 0 {
		lowers := make([]string, len(r.Lower))
		for i, id := range r.Lower {
			lowers[i] = s.layerRoot(hexID(id))
		}
		if removed, kept, err = subtract(root, lowers); err != nil {
			return nil, fmt.Errorf("subtract lower layers: %w", err)
		}
	}
	s.log().Debug("finished layer", "layer", name, "trimmed", n, "in_lower", removed, "kept", kept,
		"duration", time.Since(t0).Round(time.Millisecond))
	return open, nil
}

// makeLinks creates links (path in the layer -> target) in the tree at dir,
// creating missing parent directories. An existing identical link is fine;
// anything else at the path is an error.
func makeLinks(dir string, links map[string]string) error {
	if len(links) == 0 {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	names := make([]string, 0, len(links))
	for p := range links {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		target := links[p]
		if err := root.MkdirAll(path.Dir(p), 0o755); err != nil {
			return fmt.Errorf("link /%s: %w", p, err)
		}
		err := root.Symlink(target, p)
		if errors.Is(err, fs.ErrExist) {
			if got, rerr := root.Readlink(p); rerr == nil && got == target {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("link /%s -> %s: %w", p, target, err)
		}
	}
	return nil
}

// run runs cmd in its own process group, which is sent SIGTERM when ctx is
// done (mmdebstrap cleans up on SIGTERM) and SIGKILL 10 s later. The error
// carries the tail of the command's output; with a done ctx it wraps
// ctx.Err().
func (s *Store) run(ctx context.Context, cmd *exec.Cmd) error {
	return s.runWatched(ctx, cmd, nil)
}

// runWatched is run with the command's output also passed through clock
// (nil: not), which times its phases.
func (s *Store) runWatched(ctx context.Context, cmd *exec.Cmd, clock *phaseClock) error {
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if clock != nil {
		clock.w = out
		cmd.Stdout, cmd.Stderr = clock, clock
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil && cmd.Process != nil {
		// Children that outlived the group leader, e.g. apt under mmdebstrap.
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	s.log().Debug("command output", "argv", cmd.Args, "output", out.String())
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n, _ := b.Buffer.Write(p)
	if extra := b.Len() - b.max; extra > 0 {
		b.Next(extra)
	}
	return n, nil
}

// parsePackages parses listHook's output, sorted by package name.
func parsePackages(data []byte) ([]Package, error) {
	var pkgs []Package
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 || f[0] == "" || f[1] == "" || f[2] == "" {
			return nil, fmt.Errorf("malformed line %q", sc.Text())
		}
		pkgs = append(pkgs, Package{Name: f[0], Version: f[1], Arch: f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, errors.New("no packages")
	}
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	return pkgs, nil
}

// syncfs flushes the file system holding dir to disk.
func syncfs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// lockWait takes an flock(2) on path (exclusive, or shared with shared),
// creating it, and polls until it gets it or ctx is done. waiting is called
// once if it has to wait.
func lockWait(ctx context.Context, path string, shared bool, waiting func()) (unlock func(), err error) {
	for first := true; ; first = false {
		unlock, ok, err := tryLockMode(path, shared)
		if err != nil || ok {
			return unlock, err
		}
		if first && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tryLock takes an exclusive flock(2) on path, creating it, without waiting.
// The lock is released by unlock or when the process dies, so a killed
// build never leaves a stale lock.
func tryLock(path string) (unlock func(), ok bool, err error) {
	return tryLockMode(path, false)
}

// tryLockMode takes an flock(2) on path, exclusive or shared, without
// waiting. An exclusive holder removes the file as it unlocks, so a lock
// file lives only while it is held (store.lock, taken shared by every
// build, import and install, is the one that stays between Prunes):
// rootfs/locks no longer keeps a file for every image, layer, root and
// install ever used (issue #37).
//
// Removing a lock file is safe only because every taker checks, once it
// holds the lock, that the path still names the file it locked: a file
// removed between a taker's open and its flock is a lock no one else
// sees (the next taker creates a new file), so the taker opens the path
// again. This is the usual pattern of flock with unlink (as in
// systemd's make_lock_file or Debian's lockfile-progs).
func tryLockMode(path string, shared bool) (unlock func(), ok bool, err error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, false, err
		}
		how := unix.LOCK_EX
		if shared {
			how = unix.LOCK_SH
		}
		if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("flock %s: %w", path, err)
		}
		if same, err := namesFile(path, f); err != nil || !same {
			f.Close()
			if err != nil {
				return nil, false, err
			}
			continue // removed by its holder meanwhile: lock the new one
		}
		if shared {
			return func() { f.Close() }, true, nil
		}
		return func() {
			os.Remove(path)
			f.Close()
		}, true, nil
	}
}

// namesFile reports whether path names the open file f (the same inode
// of the same device), false when path is gone.
func namesFile(path string, f *os.File) (bool, error) {
	var held, named unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Stat(path, &named); errors.Is(err, unix.ENOENT) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	return held.Dev == named.Dev && held.Ino == named.Ino, nil
}

// removeTree removes dir and everything in it, but refuses if anything is
// mounted at or below dir: os.RemoveAll crosses mount points, and a killed
// build or a mounted root could otherwise have, say, a layer's files deleted
// through an overlay.
func removeTree(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	// The mount table shows resolved paths. Resolve the parent only: if dir
	// is itself a symlink, RemoveAll removes the link, not its target.
	real := dir
	if parent, err := filepath.EvalSymlinks(filepath.Dir(dir)); err == nil {
		real = filepath.Join(parent, filepath.Base(dir))
	}
	mounts, err := readMountinfo()
	if err != nil {
		return fmt.Errorf("refusing to remove %s: cannot list mounts: %w", dir, err)
	}
	for _, mp := range mounts {
		if mp.point == real || strings.HasPrefix(mp.point, real+"/") {
			return fmt.Errorf("refusing to remove %s: %s is mounted", dir, mp.point)
		}
	}
	return os.RemoveAll(dir)
}
