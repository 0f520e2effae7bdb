package rootfs

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// Imported images (sandcell image import): OCI images as run
// environments. An image's layers are unpacked once each, content-addressed
// by their diff id (the digest of the uncompressed tar, which the image
// config names and the import verifies), shared by every image that has
// them, and stacked per run as the same read-only overlay a language's
// layers make: the skeleton on top, then the image's layers, top first.
//
// Layout, S = Dir/rootfs:
//
//	S/images/layers/<hex>/             mode 0700: no host user but the store's owner reaches a layer
//	S/images/layers/<hex>/root/        an unpacked layer (<hex>: its diff id), never modified once there
//	S/images/layers/<hex>/layer.json   what unpacking it found (ImageLayer)
//	S/images/refs/<namehash>.json      an imported image (Image), <namehash> the SHA-256 of its name
//	S/tmp/imglayer-<hex>-<random>/     a layer being unpacked (locks/imglayer-<hex>.lock held)
//	S/tmp/imgref-<namehash>-<random>   an image record being written (locks/imgref-<namehash>.lock held)
//
// A layer directory appears by rename(2) of a finished, verified unpack
// and an image record only after all its layers: whatever the store names
// is complete. Images live in Dir only (not in shared stores).
//
// An unpacked layer is an overlayfs lower layer: an OCI whiteout
// (.wh.NAME) is an overlay whiteout (a character device 0/0) and an opaque
// marker (.wh..wh..opq) an opaque directory (overlay.opaque "y"), so the
// merged root is what the image spec says applying the layers in order
// gives. The runs never see the whiteouts: overlayfs hides them.
//
// Threats: an image is untrusted input, from whoever gave the operator the
// file. Its layers are unpacked through an os.Root without following a
// symlink, so no entry reaches outside the layer's directory (absolute
// names, "..", a symlink planted and then written through, a hard link out
// of the root: each is skipped and counted in Neutralised); device nodes,
// FIFOs, setuid and setgid bits, foreign owners and extended attributes
// (file capabilities) are dropped and counted; what an import may unpack
// is bounded (ImportOptions: bytes decompressed and apparent, entries,
// path depth, layers), so a decompression bomb or a 10 GB sparse file is
// refused, and what was unpacked of it removed; every new layer's headers
// are counted (scanLayers) before any is unpacked, so nothing is written
// of an image over its bounds. A layer keeps the image's
// modes (the sandbox sees them), world-writable ones included, behind
// its 0700 directory (closeLayerDir). Every blob is verified
// against its digest before it is used. A run in an image is locked down
// exactly like a run in a language layer: the image changes the root
// filesystem, never the isolation, the limits or the network.

const (
	imagesDir   = "images"
	refsDir     = "refs"
	layerRecord = "layer.json"
	imageFormat = 1
)

// Default bounds of an import (ImportOptions' zero values).
const (
	DefaultImageMaxBytes   = 8 << 30
	DefaultImageMaxEntries = 1000000
	DefaultImageMaxDepth   = 128
	DefaultImageMaxLayers  = 64
)

// imageNameRE is what an image name may look like: a reference as docker
// writes them (python:3.12-slim, registry.example/team/build:2024.1).
var imageNameRE = lazyRE(`^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$`)

// ImageConfig is what a run takes from an image's configuration.
type ImageConfig struct {
	// Env is the image's environment (PATH among it), set before the
	// language's and the request's (which win on the same name); HOME is
	// left out: it stays /work, the sandbox's writable home.
	Env []string `json:"env,omitempty"`
	// Entrypoint and Cmd are what a run in the image without a program or
	// command runs (sandcell run --image NAME): Entrypoint followed by the
	// request's arguments, or by Cmd when it gives none.
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// WorkingDir is the working directory of such a run; a language's
	// program or a command runs in /work, where its files are.
	WorkingDir string `json:"working_dir,omitempty"`
	// User is the image's user, recorded only: every run is the sandbox
	// user (uid 1000), whatever the image says.
	User string `json:"user,omitempty"`
	// Ignored names the config fields the image sets that sandcell does
	// not honour (ExposedPorts, Volumes, Healthcheck, StopSignal...): a
	// sandbox has no network and no volumes, and a run ends with its
	// program.
	Ignored []string `json:"ignored,omitempty"`
}

// Image is an imported image, as the store records it.
type Image struct {
	Format int    `json:"format"`
	Name   string `json:"name"`
	// Source is the kind of file it came from (SourceOCILayout...).
	Source string `json:"source"`
	// Digest is its manifest's digest (empty for a docker save archive,
	// which has none), ConfigDigest its config's: the image's identity.
	Digest       string `json:"digest,omitempty"`
	ConfigDigest string `json:"config_digest"`
	// Layers are its layers' diff ids, bottom first.
	Layers []string `json:"layers"`
	// Workdir is the diff id of a layer sandcell put on top of them
	// holding the config's WorkingDir, which the image's layers lack (""
	// when they have it): docker's runtime makes a missing working
	// directory when a container starts, but a sandbox's root is
	// read-only, so the import makes it (owned by root, mode 0755, as
	// runc's mkdir does).
	Workdir string      `json:"workdir_layer,omitempty"`
	Config  ImageConfig `json:"config"`
	// Bytes and Entries are the size of its unpacked layers (shared ones
	// included).
	Bytes   int64 `json:"bytes"`
	Entries int64 `json:"entries"`
	// Report says what the import did and neutralised.
	Report   ImportReport `json:"report"`
	Imported time.Time    `json:"imported"`
}

// ImportReport is what ImportImage did.
type ImportReport struct {
	// Layers is the image's layer count: Unpacked of them were unpacked
	// now, Shared were in the store already (another image has them, or
	// an earlier import).
	Layers   int `json:"layers"`
	Unpacked int `json:"unpacked"`
	Shared   int `json:"shared"`
	// Whiteouts and Opaque count the overlay whiteouts and opaque
	// directories its layers hold.
	Whiteouts int `json:"whiteouts"`
	Opaque    int `json:"opaque"`
	// Neutralised sums its layers' (see Neutralised): what an untrusted
	// image held that was not unpacked as given.
	Neutralised Neutralised `json:"neutralised"`
	// Seconds is how long the import took.
	Seconds float64 `json:"seconds"`
}

// ImageLayer is an unpacked image layer's record (layer.json).
type ImageLayer struct {
	Format int `json:"format"`
	// DiffID is the digest of the uncompressed tar; Digest the blob's it
	// was first unpacked from ("" when the source did not say) and
	// MediaType its media type.
	DiffID    string `json:"diff_id"`
	Digest    string `json:"digest,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	// Tree hashes the unpacked tree (whiteouts included, as "o" entries);
	// Opaque lists its opaque directories, which Tree does not show.
	Tree        TreeHash    `json:"tree"`
	Opaque      []string    `json:"opaque,omitempty"`
	Whiteouts   int         `json:"whiteouts"`
	Neutralised Neutralised `json:"neutralised"`
	Unpacked    time.Time   `json:"unpacked"`
	UnpackMS    int64       `json:"unpack_ms"`
}

// ImportOptions bound and name an import. Zero fields take the defaults.
type ImportOptions struct {
	// Name is what runs call the image (--image NAME); "" takes the name
	// the source gives it (docker save's RepoTags, an OCI layout's ref
	// name annotation).
	Name string
	// MaxBytes bounds both the decompressed tar streams and the apparent
	// size of the unpacked files, over all the layers unpacked (default
	// 8 GiB). MaxEntries bounds their entries (1,000,000), MaxDepth a
	// path's depth (128), MaxLayers the image's layers (64; an overlay's
	// options must fit in a page).
	MaxBytes   int64
	MaxEntries int64
	MaxDepth   int
	MaxLayers  int
	// Progress, if set, is told before each layer: its number (from 1),
	// the layer count and its diff id.
	Progress func(layer, layers int, diffID string)
}

// ImportImage imports the image at path: an OCI image layout directory,
// the same as a tar archive (skopeo copy ... oci-archive:), or a docker
// save archive (podman save, skopeo copy ... docker-archive:). For a
// layout holding several images the one for this host's platform is
// taken (Name picks among several). Every blob is verified; each layer not
// in the store yet is unpacked (see the threats in the layout comment),
// then the image is recorded under its name, replacing an earlier image
// of that name.
//
// Preconditions: root (mknod of whiteouts, trusted.* xattrs), or root of
// sandcell's user namespace on a kernel that lets it make whiteouts.
func (s *Store) ImportImage(ctx context.Context, unsafePath string, opts ImportOptions) (Image, error) {
	start := time.Now()
	opts.MaxBytes = cmp.Or(opts.MaxBytes, DefaultImageMaxBytes)
	opts.MaxEntries = cmp.Or(opts.MaxEntries, DefaultImageMaxEntries)
	opts.MaxDepth = cmp.Or(opts.MaxDepth, DefaultImageMaxDepth)
	opts.MaxLayers = cmp.Or(opts.MaxLayers, DefaultImageMaxLayers)
	if opts.Name != "" && !imageNameRE().MatchString(opts.Name) {
		return Image{}, fmt.Errorf("%w: name %q must match %s", ErrBadImage, truncateReq(opts.Name), imageNameRE())
	}
	src, err := openImageSource(unsafePath)
	if err != nil {
		return Image{}, err
	}
	defer src.close()
	ri, err := src.resolve(opts.Name)
	if err != nil {
		return Image{}, err
	}
	name := cmp.Or(opts.Name, ri.refName)
	if name == "" {
		return Image{}, fmt.Errorf("%w: the image names itself nothing: give it a name (--name NAME)", ErrBadImage)
	}
	if !imageNameRE().MatchString(name) {
		return Image{}, fmt.Errorf("%w: the image calls itself %q, which is not a valid name: give one (--name NAME)", ErrBadImage, truncateReq(name))
	}
	if len(ri.layers) > opts.MaxLayers {
		return Image{}, fmt.Errorf("%w: %d layers, at most %d (squash the image)", ErrImageTooLarge, len(ri.layers), opts.MaxLayers)
	}
	dir, err := s.dir()
	if err != nil {
		return Image{}, err
	}
	// One more for the layer a missing WorkingDir may need (addWorkdir).
	if err := s.checkOverlayOptions(dir, len(ri.layers)+1); err != nil {
		return Image{}, err
	}
	for _, d := range []string{filepath.Join(dir, locksDir), filepath.Join(dir, tmpDir), filepath.Join(dir, imagesDir, layersDir), filepath.Join(dir, imagesDir, refsDir)} {
		if err := mkdirAll(d); err != nil {
			return Image{}, err
		}
	}
	s.warnUntraversable(dir)
	// Prune removes unreferenced layers under the store lock: hold it
	// shared, as builds do, so it never sees a layer whose image is not
	// recorded yet.
	unlockStore, err := lockWait(ctx, filepath.Join(dir, locksDir, storeLock), true, func() {
		s.log().Info("waiting for a prune to finish", "image", name)
	})
	if err != nil {
		return Image{}, fmt.Errorf("lock store: %w", err)
	}
	defer unlockStore()
	if _, err := s.ensureLayer(ctx, KindSkeleton, skeletonRecipe(), func(string, string) {}); err != nil {
		return Image{}, fmt.Errorf("skeleton layer: %w", err)
	}

	img := Image{Format: imageFormat, Name: name, Source: ri.kind, Digest: ri.manifest, ConfigDigest: ri.configID,
		Config: imageConfig(ri)}
	img.Report.Layers = len(ri.layers)
	newBudget := func() *budget {
		return &budget{maxStream: opts.MaxBytes, maxBytes: opts.MaxBytes, maxEntries: opts.MaxEntries, maxDepth: opts.MaxDepth}
	}
	s.log().Info("reading the layers' headers before unpacking", "image", name, "layers", len(ri.layers))
	if err := s.scanLayers(ctx, src, ri.layers, newBudget()); err != nil {
		return Image{}, fmt.Errorf("image %s: %w (nothing was unpacked)", name, err)
	}
	// Unpacking counts again, against a budget of its own: the file may
	// have changed since the scan (its digests are checked again too).
	b := newBudget()
	for i, l := range ri.layers {
		if slices.Contains(img.Layers, l.diffID) {
			// The same layer twice (an empty layer repeated): once in the
			// stack is the same root.
			img.Report.Layers--
			continue
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(ri.layers), l.diffID)
		}
		rec, shared, err := s.importLayer(ctx, l, func() (*layerStream, error) { return src.openLayer(l, b) }, b)
		if err != nil {
			return Image{}, fmt.Errorf("image %s, layer %d of %d: %w", name, i+1, len(ri.layers), err)
		}
		if shared {
			img.Report.Shared++
		} else {
			img.Report.Unpacked++
		}
		img.Layers = append(img.Layers, l.diffID)
		img.Bytes += rec.Tree.Bytes
		img.Entries += rec.Tree.Entries
		img.Report.Whiteouts += rec.Whiteouts
		img.Report.Opaque += len(rec.Opaque)
		img.Report.Neutralised.add(rec.Neutralised)
	}
	if err := s.addWorkdir(ctx, &img, b); err != nil {
		return Image{}, fmt.Errorf("image %s: its WorkingDir %q: %w", name, img.Config.WorkingDir, err)
	}
	img.Imported = time.Now().UTC()
	img.Report.Seconds = time.Since(start).Round(time.Millisecond).Seconds()
	if err := s.writeImage(ctx, img); err != nil {
		return Image{}, err
	}
	// An image of the same name imported before may have left a root
	// no image uses any more.
	if _, err := s.removeRoots(s.liveRoots()); err != nil {
		s.log().Warn("removing stale roots", "err", err)
	}
	s.log().Info("image imported", "image", name, "layers", img.Report.Layers, "unpacked", img.Report.Unpacked,
		"shared", img.Report.Shared, "bytes", img.Bytes, "neutralised", img.Report.Neutralised.Total(), "seconds", img.Report.Seconds)
	return img, nil
}

// scanLayers reads the tar headers of the layers the store lacks and
// checks their digests, counting them against b (scanLayer), before any
// is unpacked.
func (s *Store) scanLayers(ctx context.Context, src *imageSource, layers []layerBlob, b *budget) error {
	seen := map[string]bool{}
	for i, l := range layers {
		h := hexID(l.diffID)
		if seen[h] {
			continue
		}
		seen[h] = true
		if _, err := s.imageLayer(h); err == nil {
			continue // unpacked already: costs nothing
		}
		stream, err := src.openLayer(l, b)
		if err != nil {
			return fmt.Errorf("layer %d of %d: %w", i+1, len(layers), err)
		}
		err = scanLayer(ctx, stream.tar, b)
		if err == nil {
			err = stream.finish()
		}
		stream.close()
		if err != nil {
			return fmt.Errorf("layer %d of %d: %w", i+1, len(layers), layerErr(l, err))
		}
	}
	return nil
}

// checkOverlayOptions refuses an image whose overlay (the skeleton and its
// layers) would not fit in a page of mount options.
func (s *Store) checkOverlayOptions(dir string, layers int) error {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	one := len(filepath.Join(dir, imagesDir, layersDir, strings.Repeat("0", 64), "root")) + 1
	n := len("lowerdir=,userxattr") + len(filepath.Join(dir, layersDir, strings.Repeat("0", 64), "root")) + layers*one
	if n >= os.Getpagesize() {
		return fmt.Errorf("%w: %d layers make overlay options of %d bytes, more than a page (%d) with the store at %s: squash the image or use a shorter --home",
			ErrImageTooLarge, layers, n, os.Getpagesize(), dir)
	}
	return nil
}

// imageConfig is what runs take from the image's config.
func imageConfig(ri resolvedImage) ImageConfig {
	c := ri.config.Config
	out := ImageConfig{Entrypoint: slices.Clone(c.Entrypoint), Cmd: slices.Clone(c.Cmd), WorkingDir: c.WorkingDir, User: c.User}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); ok && k != "" && k != "HOME" && !strings.ContainsRune(e, 0) {
			out.Env = append(out.Env, e)
		}
	}
	for k, v := range ri.rawConfig {
		switch k {
		case "Env", "Entrypoint", "Cmd", "WorkingDir", "User", "Labels", "ArgsEscaped",
			"Hostname", "Domainname", "AttachStdin", "AttachStdout", "AttachStderr", "Tty", "OpenStdin", "StdinOnce", "Image":
			continue // honoured, metadata, or docker's per-container defaults
		}
		if s := strings.TrimSpace(string(v)); s == "null" || s == "{}" || s == "[]" || s == `""` {
			continue
		}
		out.Ignored = append(out.Ignored, k)
	}
	slices.Sort(out.Ignored)
	return out
}

// addWorkdir gives img the layer with its WorkingDir (Image.Workdir) when
// its layers lack it: the directory and its missing parents (mode 0755,
// owned by root), and its parents that exist with the modes and times
// they have, so the merged root shows them unchanged. A WorkingDir that
// is there (of any type: a file there is refused when a run starts), is
// not absolute, or lies below a runtime mountpoint (/work, /tmp...: a
// run mounts afresh over it) gets no layer. Symlinks on the way are
// resolved within the image's root: the layer holds the real path.
func (s *Store) addWorkdir(ctx context.Context, img *Image, b *budget) error {
	wd := img.Config.WorkingDir
	if wd == "" || !path.IsAbs(wd) || BelowMountpoint(wd) != "" {
		return nil
	}
	root, err := s.mountImage(*img)
	if err != nil {
		return err
	}
	// The root is not live until the image is recorded: another process's
	// removeRoots may unmount it meanwhile, and an empty directory lacks
	// every path. The overlay's device must be the same once it is read.
	var before unix.Stat_t
	if err := unix.Stat(root, &before); err != nil {
		return err
	}
	host, err := securejoin.SecureJoin(root, wd)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(host); !errors.Is(err, fs.ErrNotExist) {
		return nil // there, or not a directory's path (refused at run time)
	}
	rel, err := filepath.Rel(root, host)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("resolves to %s, outside the image's root", host)
	}
	if BelowMountpoint("/"+rel) != "" {
		return nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	cur := ""
	for c := range strings.SplitSeq(rel, "/") {
		cur = path.Join(cur, c)
		h := &tar.Header{Name: cur + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if fi, err := os.Lstat(filepath.Join(root, cur)); err == nil {
			h.Mode, h.ModTime = int64(fi.Mode().Perm()), fi.ModTime()
			if fi.Mode()&fs.ModeSticky != 0 {
				h.Mode |= 0o1000
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	var after, parent unix.Stat_t
	if err := unix.Stat(root, &after); err != nil {
		return err
	}
	if err := unix.Stat(filepath.Dir(root), &parent); err != nil {
		return err
	}
	if after.Dev != before.Dev || after.Dev == parent.Dev {
		return fmt.Errorf("the image's root at %s was unmounted while it was read (by another sandcell): import again", root)
	}
	data := buf.Bytes()
	sum := sha256.Sum256(data)
	l := layerBlob{diffID: "sha256:" + hex.EncodeToString(sum[:]), size: int64(len(data)), mediaType: "application/vnd.oci.image.layer.v1.tar"}
	open := func() (*layerStream, error) {
		return &layerStream{tar: &streamCounter{r: bytes.NewReader(data), b: b}, finish: func() error { return nil }, close: func() {}}, nil
	}
	if _, _, err := s.importLayer(ctx, l, open, b); err != nil {
		return err
	}
	img.Workdir = l.diffID
	s.log().Info("made the image's missing WorkingDir", "image", img.Name, "dir", wd, "layer", l.diffID)
	return nil
}

// importLayer returns the record of layer l, unpacking it first (from the
// stream open gives) unless the store has it. One unpacker per layer,
// across processes (flock).
func (s *Store) importLayer(ctx context.Context, l layerBlob, open func() (*layerStream, error), b *budget) (ImageLayer, bool, error) {
	dir, err := s.dir()
	if err != nil {
		return ImageLayer{}, false, err
	}
	h := hexID(l.diffID)
	if rec, err := s.imageLayer(h); err == nil {
		return rec, true, nil
	}
	unlock, err := lockWait(ctx, filepath.Join(dir, locksDir, "imglayer-"+h+".lock"), false, func() {
		s.log().Info("waiting for another import of the same layer", "layer", l.diffID)
	})
	if err != nil {
		return ImageLayer{}, false, fmt.Errorf("lock layer: %w", err)
	}
	defer unlock()
	if rec, err := s.imageLayer(h); err == nil {
		return rec, true, nil
	}
	start := time.Now()
	tmp := tmpPath(dir, "imglayer-"+h)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return ImageLayer{}, false, err
	}
	committed := false
	defer func() {
		if !committed {
			if err := removeTree(tmp); err != nil {
				s.log().Warn("remove unpacked layer", "dir", tmp, "err", err)
			}
		}
	}()
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return ImageLayer{}, false, err
	}
	stream, err := open()
	if err != nil {
		return ImageLayer{}, false, err
	}
	res, err := applyLayer(ctx, stream.tar, root, b)
	if err == nil {
		err = stream.finish()
	}
	stream.close()
	if err != nil {
		return ImageLayer{}, false, layerErr(l, err)
	}
	tree, err := hashTree(ctx, root)
	if err != nil {
		return ImageLayer{}, false, fmt.Errorf("hash layer: %w", err)
	}
	rec := ImageLayer{Format: imageFormat, DiffID: l.diffID, Digest: l.digest, MediaType: l.mediaType, Tree: tree,
		Opaque: res.opaque, Whiteouts: res.whiteouts, Neutralised: res.n, Unpacked: time.Now().UTC(),
		UnpackMS: time.Since(start).Milliseconds()}
	if err := writeJSONFile(filepath.Join(tmp, layerRecord), rec); err != nil {
		return ImageLayer{}, false, err
	}
	if err := closeLayerDir(tmp); err != nil {
		return ImageLayer{}, false, err
	}
	if err := syncfs(tmp); err != nil {
		return ImageLayer{}, false, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, imagesDir, layersDir, h)); err != nil {
		return ImageLayer{}, false, err
	}
	committed = true
	s.log().Info("image layer unpacked", "layer", l.diffID, "bytes", tree.Bytes, "entries", tree.Entries,
		"neutralised", res.n.Total(), "ms", rec.UnpackMS)
	return rec, false, nil
}

// closeLayerDir makes an image layer's directory (layers/<hex>, which
// holds root/ and layer.json) mode 0700. An image's files keep the modes
// its tar gives them, 0777 directories and 0666 files included, because
// that is what the sandbox must see (stat in a run shows the image's
// modes, as under docker). Without this parent, every local user could
// write into a digest-checked layer through the store path, and so into
// every later run of the image (a local user poisoning a shared image,
// issue #37). Only the overlay reaches the layer: the kernel resolves a
// lowerdir with the mounter's credentials (root, or the user namespace's
// root that owns a rootless store) and reads it with them, so runs in
// user namespaces still see it; nothing else opens a layer's path.
func closeLayerDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == 0o700 {
		return nil
	}
	return os.Chmod(dir, 0o700)
}

// imageLayer reads the record of unpacked layer h (hex digits).
func (s *Store) imageLayer(h string) (ImageLayer, error) {
	dir, err := s.dir()
	if err != nil {
		return ImageLayer{}, err
	}
	var rec ImageLayer
	if err := readJSONFile(filepath.Join(dir, imagesDir, layersDir, h, layerRecord), &rec); err != nil {
		return ImageLayer{}, err
	}
	if hexID(rec.DiffID) != h {
		return ImageLayer{}, fmt.Errorf("image layer %.12s: record names %s", h, rec.DiffID)
	}
	return rec, nil
}

// refFile is the file name of image name's record.
func refFile(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

// writeImage records img under its name, atomically.
func (s *Store) writeImage(ctx context.Context, img Image) error {
	dir, err := s.dir()
	if err != nil {
		return err
	}
	key := refFile(img.Name)
	unlock, err := lockWait(ctx, filepath.Join(dir, locksDir, "imgref-"+key+".lock"), false, nil)
	if err != nil {
		return fmt.Errorf("lock image record: %w", err)
	}
	defer unlock()
	tmp := tmpPath(dir, "imgref-"+key)
	if err := writeJSONFile(tmp, img); err != nil {
		os.Remove(tmp)
		return err
	}
	refs := filepath.Join(dir, imagesDir, refsDir)
	if err := os.Rename(tmp, filepath.Join(refs, key+".json")); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncfs(refs)
}

// Images returns the imported images, sorted by name.
func (s *Store) Images() ([]Image, error) {
	dir, err := s.dir()
	if err != nil {
		return nil, err
	}
	refs := filepath.Join(dir, imagesDir, refsDir)
	entries, err := os.ReadDir(refs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, e := range entries {
		key, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !hexRE().MatchString(key) {
			continue
		}
		var img Image
		if err := readJSONFile(filepath.Join(refs, e.Name()), &img); err != nil {
			return nil, fmt.Errorf("image record %.12s: %w", key, err)
		}
		if refFile(img.Name) != key {
			return nil, fmt.Errorf("image record %.12s names image %q, which is not its file's", key, img.Name)
		}
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Image returns the imported image of that name. The error wraps
// ErrUnknownImage when there is none.
func (s *Store) Image(name string) (Image, error) {
	if !imageNameRE().MatchString(name) {
		return Image{}, fmt.Errorf("%w %q: not an image name", ErrUnknownImage, truncateReq(name))
	}
	dir, err := s.dir()
	if err != nil {
		return Image{}, err
	}
	var img Image
	err = readJSONFile(filepath.Join(dir, imagesDir, refsDir, refFile(name)+".json"), &img)
	if errors.Is(err, fs.ErrNotExist) {
		var names []string
		if imgs, err := s.Images(); err == nil {
			for _, i := range imgs {
				names = append(names, i.Name)
			}
		}
		have := "none: sandcell image import PATH --name NAME imports one"
		if len(names) > 0 {
			have = strings.Join(names, ", ")
		}
		return Image{}, fmt.Errorf("%w %q (imported: %s)", ErrUnknownImage, name, have)
	}
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	if img.Name != name {
		return Image{}, fmt.Errorf("image %s: record names %q", name, img.Name)
	}
	return img, nil
}

// RemoveImage removes the image's record, and its root if no other image
// has the same layers. Its layers stay until Prune (another image may
// share them, and removing a layer a running sandbox sees is not done
// behind its back).
func (s *Store) RemoveImage(ctx context.Context, name string) error {
	if _, err := s.Image(name); err != nil {
		return err
	}
	dir, err := s.dir()
	if err != nil {
		return err
	}
	key := refFile(name)
	unlock, err := lockWait(ctx, filepath.Join(dir, locksDir, "imgref-"+key+".lock"), false, nil)
	if err != nil {
		return fmt.Errorf("lock image record: %w", err)
	}
	err = os.Remove(filepath.Join(dir, imagesDir, refsDir, key+".json"))
	unlock()
	if err != nil {
		return err
	}
	s.forget("")
	_, err = s.removeRoots(s.liveRoots())
	return err
}

// stackLayers are the diff ids of the image's root, bottom first: its
// layers and sandcell's WorkingDir layer.
func (img Image) stackLayers() []string {
	if img.Workdir == "" {
		return img.Layers
	}
	return append(slices.Clone(img.Layers), img.Workdir)
}

// imageStack is the image's overlay stack, top first: the skeleton, then
// its layers from the top one down.
func (s *Store) imageStack(img Image) (stack, error) {
	dir, err := s.dir()
	if err != nil {
		return stack{}, err
	}
	skel, ok, err := s.lookupRecipe(skeletonRecipe().key())
	if err != nil {
		return stack{}, fmt.Errorf("skeleton layer: %w", err)
	}
	if !ok {
		return stack{}, fmt.Errorf("image %s: the skeleton layer is missing (import the image again)", img.Name)
	}
	st := stack{layers: []layerRef{skel}}
	for _, id := range slices.Backward(img.stackLayers()) {
		h := hexID(id)
		if !hexRE().MatchString(h) {
			return stack{}, fmt.Errorf("image %s: bad layer id %q", img.Name, id)
		}
		st.layers = append(st.layers, layerRef{hex: h, store: filepath.Join(dir, imagesDir)})
	}
	return st, nil
}

// ImageRoot returns the root filesystem of the imported image name, ready
// to be a sandbox's read-only root exactly like a language's (see Root):
// a read-only overlay of the skeleton over the image's layers, mounted once
// at Dir/rootfs/roots/<rootid> and shared by every run in the image.
//
// Preconditions: those of Root.
func (s *Store) ImageRoot(name string) (string, Image, error) {
	img, err := s.Image(name)
	if err != nil {
		return "", Image{}, err
	}
	point, err := s.mountImage(img)
	if err != nil {
		return "", Image{}, err
	}
	return point, img, nil
}

// mountImage mounts img's root (or finds it mounted).
func (s *Store) mountImage(img Image) (string, error) {
	st, err := s.imageStack(img)
	if err != nil {
		return "", err
	}
	// The cache key names the stack: an image imported again under the
	// same name with other layers gets its new root.
	key := Language{Name: "image " + img.Name + " " + st.rootID()}
	if point, ok := s.cachedRoot(key); ok {
		return point, nil
	}
	for _, l := range st.layers[1:] {
		if _, err := os.Stat(l.root()); err != nil {
			return "", fmt.Errorf("image %s: layer %.19s: %w (import the image again)", img.Name, "sha256:"+l.hex, err)
		}
		// A layer unpacked before its directory was closed.
		if err := closeLayerDir(filepath.Dir(l.root())); err != nil {
			return "", fmt.Errorf("image %s: layer %.19s: %w", img.Name, "sha256:"+l.hex, err)
		}
	}
	return s.mountStack(key, st)
}

// VerifyImage re-hashes the image's layers and checks their opaque
// directories against what was recorded when they were unpacked. A
// modified layer is an error wrapping ErrModified.
func (s *Store) VerifyImage(ctx context.Context, name string) error {
	img, err := s.Image(name)
	if err != nil {
		return err
	}
	st, err := s.imageStack(img)
	if err != nil {
		return err
	}
	for _, l := range st.layers[1:] {
		rec, err := s.imageLayer(l.hex)
		if err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		got, err := hashTree(ctx, l.root())
		if err != nil {
			return fmt.Errorf("image %s layer %.19s: %w", name, rec.DiffID, err)
		}
		if got.Digest != rec.Tree.Digest {
			return fmt.Errorf("image %s layer %.19s: %w: tree hash %s, unpacked as %s (run: sandcell image rm, rootfs prune, image import)",
				name, rec.DiffID, ErrModified, got.Digest, rec.Tree.Digest)
		}
		for _, p := range rec.Opaque {
			attr := opaqueUser
			if currentNS().initial() {
				attr = opaqueTrusted
			}
			buf := make([]byte, 4)
			n, err := unix.Lgetxattr(filepath.Join(l.root(), p), attr, buf)
			if err != nil || string(buf[:n]) != "y" {
				return fmt.Errorf("image %s layer %.19s: %w: directory /%s is no longer opaque", name, rec.DiffID, ErrModified, p)
			}
		}
	}
	return nil
}

// languageImage is the stack of a catalogue language whose root is an
// image (Language.Image). Not imported, the error wraps ErrNotBuilt and
// says how to import it.
func (s *Store) languageImage(lang Language) (stack, error) {
	img, err := s.Image(lang.Image)
	if errors.Is(err, ErrUnknownImage) {
		return stack{}, fmt.Errorf("%s: %w: its root is the image %s, not imported (run: sandcell image import PATH --name %s)",
			lang.Name, ErrNotBuilt, lang.Image, lang.Image)
	}
	if err != nil {
		return stack{}, err
	}
	return s.imageStack(img)
}

// imageStatus is Status for a language whose root is an image.
func (s *Store) imageStatus(lang Language, st Status) (Status, error) {
	st.Image, st.Package = lang.Image, "image "+lang.Image
	img, err := s.Image(lang.Image)
	if errors.Is(err, ErrUnknownImage) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.Built, st.Layer, st.Bytes, st.StackBytes, st.BuiltAt = true, img.ConfigDigest, img.Bytes, img.Bytes, img.Imported
	return st, nil
}

// imageRoots are the root ids of the imported images (for liveRoots).
func (s *Store) imageRoots(live map[string]bool) {
	imgs, err := s.Images()
	if err != nil {
		s.log().Warn("listing images", "err", err)
		return
	}
	for _, img := range imgs {
		if st, err := s.imageStack(img); err == nil {
			live[st.rootID()] = true
		}
	}
}

// pruneImageLayers removes the unpacked layers no image uses. The caller
// holds the store lock exclusively (no import runs).
func (s *Store) pruneImageLayers(res *Pruned) error {
	dir, err := s.dir()
	if err != nil {
		return err
	}
	imgs, err := s.Images()
	if err != nil {
		return err // keep every layer when the images cannot be listed
	}
	used := map[string]bool{}
	for _, img := range imgs {
		for _, l := range img.stackLayers() {
			used[hexID(l)] = true
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, imagesDir, layersDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		h := e.Name()
		if !hexRE().MatchString(h) || used[h] {
			continue
		}
		rec, _ := s.imageLayer(h)
		if err := removeTree(filepath.Join(dir, imagesDir, layersDir, h)); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Layers = append(res.Layers, "sha256:"+h)
		res.Bytes += rec.Tree.Bytes
		s.log().Info("pruned image layer", "id", "sha256:"+h, "bytes", rec.Tree.Bytes)
	}
	return errors.Join(errs...)
}

// tmpLock is the lock file (in locks/) that whoever works in the temporary
// entry name of tmp/ holds: a layer build's recipe lock, an image layer's
// or an image record's lock. ok is false for entries of no known kind.
func tmpLock(name string) (lock string, ok bool) {
	for _, kind := range []string{"imglayer", "imgref"} {
		if rest, found := strings.CutPrefix(name, kind+"-"); found {
			key, _, _ := strings.Cut(rest, "-")
			return kind + "-" + key + ".lock", hexRE().MatchString(key)
		}
	}
	key, _, _ := strings.Cut(name, "-")
	return "recipe-" + key + ".lock", hexRE().MatchString(key)
}

// tmpPath is a fresh name in the store's tmp/ for work whose lock is
// prefix's (see tmpLock): prefix-<random>.
func tmpPath(dir, prefix string) string {
	return filepath.Join(dir, tmpDir, prefix+"-"+rand.Text()[:12])
}

// writeJSONFile writes v to file (mode 0644 whatever the umask) and syncs it.
func writeJSONFile(file string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readJSONFile decodes a record of the store (at most 16 MiB).
func readJSONFile(file string, v any) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}
