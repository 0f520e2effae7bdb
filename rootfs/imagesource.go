package rootfs

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// Bounds on the metadata of an image (it is untrusted input, like its
// layers): JSON documents, entries of an archive, nested indexes.
const (
	maxImageJSON      = 4 << 20
	maxArchiveEntries = 100000
	maxIndexDepth     = 4
)

// The kinds of image source ImportImage reads.
const (
	SourceOCILayout     = "oci-layout"     // a directory: oci-layout, index.json, blobs/sha256/...
	SourceOCIArchive    = "oci-archive"    // the same as one tar file
	SourceDockerArchive = "docker-archive" // docker save / podman save: manifest.json, config and layer files
)

// imageSource is an image's files by name, whatever holds them: a
// directory (read through an os.Root, so a symlink in an untrusted layout
// cannot lead a read out of it) or a tar archive (its regular entries,
// read in place).
type imageSource struct {
	kind  string
	open  func(name string) (io.ReadCloser, int64, error) // size -1: unknown
	has   func(name string) bool
	close func() error
}

// openImageSource opens an OCI layout directory, an OCI layout archive or
// a docker-save archive.
func openImageSource(unsafePath string) (*imageSource, error) {
	fi, err := os.Stat(unsafePath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadImage, err)
	}
	var src *imageSource
	if fi.IsDir() {
		src, err = dirSource(unsafePath)
	} else {
		src, err = archiveSource(unsafePath)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case src.has("index.json") && src.kind == "dir":
		src.kind = SourceOCILayout
	case src.has("index.json"):
		src.kind = SourceOCIArchive
	case src.has("manifest.json"):
		src.kind = SourceDockerArchive
	default:
		src.close()
		return nil, fmt.Errorf("%w: %s holds neither index.json (an OCI image layout) nor manifest.json (docker save)", ErrBadImage, unsafePath)
	}
	return src, nil
}

func dirSource(dir string) (*imageSource, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadImage, err)
	}
	open := func(name string) (io.ReadCloser, int64, error) {
		f, err := root.Open(name)
		if err != nil {
			return nil, 0, err
		}
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			f.Close()
			return nil, 0, fmt.Errorf("%s: not a regular file", name)
		}
		return f, fi.Size(), nil
	}
	has := func(name string) bool {
		fi, err := root.Stat(name)
		return err == nil && fi.Mode().IsRegular()
	}
	return &imageSource{kind: "dir", open: open, has: has, close: root.Close}, nil
}

// archiveSource indexes the regular entries of a tar archive and reads
// them in place (io.SectionReader): nothing is extracted.
func archiveSource(file string) (*imageSource, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadImage, err)
	}
	type section struct{ off, size int64 }
	entries := map[string]section{}
	tr := tar.NewReader(f) // f is an io.Seeker: entries' data is skipped, not read
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %s is not a tar archive of an image: %w", ErrBadImage, file, err)
		}
		if n >= maxArchiveEntries {
			f.Close()
			return nil, fmt.Errorf("%w: the archive has more than %d entries", ErrBadImage, maxArchiveEntries)
		}
		name, ok := layerName(hdr.Name)
		if !ok || hdr.Typeflag != tar.TypeReg {
			continue
		}
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			f.Close()
			return nil, err
		}
		entries[name] = section{off, hdr.Size}
	}
	open := func(name string) (io.ReadCloser, int64, error) {
		s, ok := entries[name]
		if !ok {
			return nil, 0, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		return io.NopCloser(io.NewSectionReader(f, s.off, s.size)), s.size, nil
	}
	has := func(name string) bool { _, ok := entries[name]; return ok }
	return &imageSource{kind: "archive", open: open, has: has, close: f.Close}, nil
}

// digestRE is the one digest algorithm sandcell verifies.
var digestRE = lazyRE(`^sha256:[0-9a-f]{64}$`)

// verifier hashes and counts what is read through it and fails the read
// that reaches the end if the content is not the expected digest and
// size: a blob is never used unverified.
type verifier struct {
	r      io.Reader
	h      hash.Hash
	n      int64
	size   int64  // -1: unknown
	digest string // "": not known (docker save's layer.tar files)
	what   string
}

func newVerifier(r io.Reader, digest string, size int64, what string) *verifier {
	return &verifier{r: r, h: sha256.New(), size: size, digest: digest, what: what}
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.size >= 0 && v.n > v.size {
		return n, fmt.Errorf("%w: %s is larger than its descriptor's %d bytes", ErrBadImage, v.what, v.size)
	}
	if errors.Is(err, io.EOF) {
		if verr := v.check(); verr != nil {
			return n, verr
		}
	}
	return n, err
}

func (v *verifier) check() error {
	if v.size >= 0 && v.n != v.size {
		return fmt.Errorf("%w: %s is %d bytes, its descriptor says %d", ErrBadImage, v.what, v.n, v.size)
	}
	if got := v.sum(); v.digest != "" && got != v.digest {
		return fmt.Errorf("%w: %s has digest %s, not %s", ErrBadImage, v.what, got, v.digest)
	}
	return nil
}

func (v *verifier) sum() string { return "sha256:" + hex.EncodeToString(v.h.Sum(nil)) }

// blobName is the file of a blob in an OCI layout.
func blobName(digest string) (string, error) {
	if !digestRE().MatchString(digest) {
		return "", fmt.Errorf("%w: digest %q is not sha256:<64 hex digits> (the only algorithm sandcell verifies)", ErrBadImage, truncateReq(digest))
	}
	return "blobs/sha256/" + digest[len("sha256:"):], nil
}

// readJSON reads and decodes a small document (at most maxImageJSON),
// verified against digest and size when they are known.
func (src *imageSource) readJSON(name, digest string, size int64, v any) ([]byte, error) {
	rc, n, err := src.open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadImage, err)
	}
	defer rc.Close()
	if size < 0 {
		size = -1
	}
	if size >= 0 && n >= 0 && n != size {
		return nil, fmt.Errorf("%w: %s is %d bytes, its descriptor says %d", ErrBadImage, name, n, size)
	}
	data, err := io.ReadAll(io.LimitReader(newVerifier(rc, digest, size, name), maxImageJSON+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxImageJSON {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadImage, name, maxImageJSON)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadImage, name, err)
	}
	return data, nil
}

// resolvedImage is an image found in a source, its blobs not yet read.
type resolvedImage struct {
	kind     string
	refName  string // the name the source gives it, if any
	manifest string // the manifest's digest ("" for docker save)
	configID string // the config's digest
	config   v1.Image
	// rawConfig are the config's "config" keys, to say which were ignored.
	rawConfig map[string]json.RawMessage
	layers    []layerBlob // bottom first
}

// layerBlob is one layer: where its blob is and what it must hash to.
type layerBlob struct {
	file      string
	digest    string // the compressed blob's ("" : unknown, docker save)
	size      int64  // -1: unknown
	diffID    string // the uncompressed tar's, from the config
	mediaType string
}

// Media types sandcell reads.
var (
	indexTypes    = []string{v1.MediaTypeImageIndex, "application/vnd.docker.distribution.manifest.list.v2+json"}
	manifestTypes = []string{v1.MediaTypeImageManifest, "application/vnd.docker.distribution.manifest.v2+json"}
	layerTypes    = []string{v1.MediaTypeImageLayer, v1.MediaTypeImageLayerGzip, v1.MediaTypeImageLayerZstd,
		"application/vnd.docker.image.rootfs.diff.tar", "application/vnd.docker.image.rootfs.diff.tar.gzip",
		"application/vnd.docker.image.rootfs.diff.tar.zstd"}
)

// resolve finds the image of src to import: for an OCI layout the
// manifest for this host's platform (name picks among several), for a
// docker save archive its one image.
func (src *imageSource) resolve(name string) (resolvedImage, error) {
	if src.kind == SourceDockerArchive {
		return src.resolveDocker()
	}
	var idx v1.Index
	if _, err := src.readJSON("index.json", "", -1, &idx); err != nil {
		return resolvedImage{}, err
	}
	var found []v1.Descriptor
	if err := src.manifests(idx, 0, &found); err != nil {
		return resolvedImage{}, err
	}
	if len(found) > 1 && name != "" {
		var named []v1.Descriptor
		for _, d := range found {
			if ref := d.Annotations[v1.AnnotationRefName]; ref != "" && (ref == name || strings.HasSuffix(name, ":"+ref)) {
				named = append(named, d)
			}
		}
		if len(named) > 0 {
			found = named
		}
	}
	switch {
	case len(found) == 0:
		return resolvedImage{}, fmt.Errorf("%w: the layout has no image manifest for linux/%s", ErrBadImage, runtime.GOARCH)
	case len(found) > 1:
		var refs []string
		for _, d := range found {
			refs = append(refs, cmp.Or(d.Annotations[v1.AnnotationRefName], string(d.Digest)))
		}
		return resolvedImage{}, fmt.Errorf("%w: the layout has %d images for linux/%s (%s): give --name one of their ref names",
			ErrBadImage, len(found), runtime.GOARCH, strings.Join(refs, ", "))
	}
	d := found[0]
	file, err := blobName(string(d.Digest))
	if err != nil {
		return resolvedImage{}, err
	}
	var m v1.Manifest
	if _, err := src.readJSON(file, string(d.Digest), d.Size, &m); err != nil {
		return resolvedImage{}, err
	}
	if m.MediaType != "" && !slices.Contains(manifestTypes, m.MediaType) {
		return resolvedImage{}, fmt.Errorf("%w: manifest media type %q", ErrBadImage, m.MediaType)
	}
	img := resolvedImage{kind: src.kind, manifest: string(d.Digest),
		refName: cmp.Or(d.Annotations["io.containerd.image.name"], d.Annotations[v1.AnnotationRefName])}
	cfile, err := blobName(string(m.Config.Digest))
	if err != nil {
		return resolvedImage{}, err
	}
	if err := src.readConfig(&img, cfile, string(m.Config.Digest), m.Config.Size); err != nil {
		return resolvedImage{}, err
	}
	if len(m.Layers) != len(img.config.RootFS.DiffIDs) {
		return resolvedImage{}, fmt.Errorf("%w: the manifest has %d layers, the config %d diff ids", ErrBadImage, len(m.Layers), len(img.config.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		if !slices.Contains(layerTypes, l.MediaType) {
			return resolvedImage{}, fmt.Errorf("%w: layer %d has media type %q, not a tar layer sandcell reads", ErrBadImage, i, l.MediaType)
		}
		f, err := blobName(string(l.Digest))
		if err != nil {
			return resolvedImage{}, err
		}
		img.layers = append(img.layers, layerBlob{file: f, digest: string(l.Digest), size: l.Size,
			diffID: string(img.config.RootFS.DiffIDs[i]), mediaType: l.MediaType})
	}
	return img, nil
}

// manifests collects the image manifests of idx for this host's platform,
// descending into nested indexes.
func (src *imageSource) manifests(idx v1.Index, depth int, out *[]v1.Descriptor) error {
	if depth > maxIndexDepth {
		return fmt.Errorf("%w: indexes nested more than %d deep", ErrBadImage, maxIndexDepth)
	}
	for _, d := range idx.Manifests {
		if p := d.Platform; p != nil && (p.OS != "linux" || p.Architecture != runtime.GOARCH) {
			continue
		}
		switch {
		case slices.Contains(manifestTypes, d.MediaType):
			*out = append(*out, d)
		case slices.Contains(indexTypes, d.MediaType):
			file, err := blobName(string(d.Digest))
			if err != nil {
				return err
			}
			var sub v1.Index
			if _, err := src.readJSON(file, string(d.Digest), d.Size, &sub); err != nil {
				return err
			}
			if err := src.manifests(sub, depth+1, out); err != nil {
				return err
			}
		}
		// Anything else (attestations, signatures, artifacts) is not an image.
	}
	return nil
}

// resolveDocker reads a docker save archive's manifest.json: one image,
// its config, its layer files.
func (src *imageSource) resolveDocker() (resolvedImage, error) {
	var ms []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if _, err := src.readJSON("manifest.json", "", -1, &ms); err != nil {
		return resolvedImage{}, err
	}
	if len(ms) != 1 {
		return resolvedImage{}, fmt.Errorf("%w: the archive holds %d images; save one image per archive", ErrBadImage, len(ms))
	}
	m := ms[0]
	img := resolvedImage{kind: src.kind}
	if len(m.RepoTags) > 0 {
		img.refName = m.RepoTags[0]
	}
	cfile, ok := layerName(m.Config)
	if !ok {
		return resolvedImage{}, fmt.Errorf("%w: config path %q", ErrBadImage, truncateReq(m.Config))
	}
	if err := src.readConfig(&img, cfile, fileDigest(cfile, ".json"), -1); err != nil {
		return resolvedImage{}, err
	}
	if len(m.Layers) != len(img.config.RootFS.DiffIDs) {
		return resolvedImage{}, fmt.Errorf("%w: manifest.json lists %d layers, the config %d diff ids", ErrBadImage, len(m.Layers), len(img.config.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		f, ok := layerName(l)
		if !ok {
			return resolvedImage{}, fmt.Errorf("%w: layer path %q", ErrBadImage, truncateReq(l))
		}
		img.layers = append(img.layers, layerBlob{file: f, digest: fileDigest(f, ".tar.gz"), size: -1,
			diffID: string(img.config.RootFS.DiffIDs[i])})
	}
	return img, nil
}

// fileDigest is the digest a docker save file's name states
// ("blobs/sha256/<hex>", "<hex>.json", "sha256:<hex>"), or "" when it
// states none.
func fileDigest(name, ext string) string {
	base := strings.TrimPrefix(strings.TrimSuffix(path.Base(name), ext), "sha256:")
	if hexRE().MatchString(base) {
		return "sha256:" + base
	}
	return ""
}

// readConfig reads, verifies and checks the image config.
func (src *imageSource) readConfig(img *resolvedImage, file, digest string, size int64) error {
	raw, err := src.readJSON(file, digest, size, &img.config)
	if err != nil {
		return err
	}
	var top struct {
		Config map[string]json.RawMessage `json:"config"`
	}
	_ = json.Unmarshal(raw, &top)
	img.rawConfig = top.Config
	sum := sha256.Sum256(raw)
	img.configID = "sha256:" + hex.EncodeToString(sum[:])
	c := img.config
	if (c.OS != "" && c.OS != "linux") || (c.Architecture != "" && c.Architecture != runtime.GOARCH) {
		return fmt.Errorf("%w: the image is for %s/%s; this host runs linux/%s", ErrBadImage, c.OS, c.Architecture, runtime.GOARCH)
	}
	if c.RootFS.Type != "layers" {
		return fmt.Errorf("%w: config rootfs type %q, want \"layers\"", ErrBadImage, c.RootFS.Type)
	}
	if len(c.RootFS.DiffIDs) == 0 {
		return fmt.Errorf("%w: the image has no layers", ErrBadImage)
	}
	for _, d := range c.RootFS.DiffIDs {
		if !digestRE().MatchString(string(d)) {
			return fmt.Errorf("%w: diff id %q is not sha256:<64 hex digits>", ErrBadImage, truncateReq(string(d)))
		}
	}
	return nil
}

// layerStream is a layer blob opened for unpacking: its tar stream
// (decompressed, counted against b, hashed for the diff id) and the check
// to run once the tar is read.
type layerStream struct {
	tar    io.Reader
	finish func() error // drains and verifies both digests
	close  func()
}

// openLayer opens l's blob. Compression is told from the content (gzip,
// zstd or none), which must agree with a media type that names one.
func (src *imageSource) openLayer(l layerBlob, b *budget) (*layerStream, error) {
	rc, n, err := src.open(l.file)
	if err != nil {
		return nil, fmt.Errorf("%w: layer %s: %w", ErrBadImage, l.diffID, err)
	}
	if l.size >= 0 && n >= 0 && n != l.size {
		rc.Close()
		return nil, fmt.Errorf("%w: layer blob %s is %d bytes, its descriptor says %d", ErrBadImage, l.file, n, l.size)
	}
	blob := newVerifier(rc, l.digest, l.size, "layer blob "+l.file)
	br := bufio.NewReaderSize(blob, 64<<10)
	magic, _ := br.Peek(4)
	var dec io.Reader
	var closeDec func()
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		if strings.HasSuffix(l.mediaType, "zstd") {
			rc.Close()
			return nil, fmt.Errorf("%w: layer %s: media type %s but gzip content", ErrBadImage, l.diffID, l.mediaType)
		}
		zr, err := gzip.NewReader(br)
		if err != nil {
			rc.Close()
			return nil, fmt.Errorf("%w: layer %s: %w", ErrBadImage, l.diffID, err)
		}
		dec, closeDec = zr, func() { zr.Close() }
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		if strings.HasSuffix(l.mediaType, "gzip") {
			rc.Close()
			return nil, fmt.Errorf("%w: layer %s: media type %s but zstd content", ErrBadImage, l.diffID, l.mediaType)
		}
		// The decoder's memory is bounded: a frame asking for a huge
		// window is refused, not allocated.
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20), zstd.WithDecoderMaxWindow(64<<20))
		if err != nil {
			rc.Close()
			return nil, err
		}
		dec, closeDec = zr, zr.Close
	default:
		if strings.HasSuffix(l.mediaType, "gzip") || strings.HasSuffix(l.mediaType, "zstd") {
			rc.Close()
			return nil, fmt.Errorf("%w: layer %s: media type %s but uncompressed content", ErrBadImage, l.diffID, l.mediaType)
		}
		dec, closeDec = br, func() {}
	}
	diff := sha256.New()
	stream := io.TeeReader(&streamCounter{r: dec, b: b}, diff)
	finish := func() error {
		// The diff id covers the whole tar stream, padding after the
		// end-of-archive blocks included; the blob digest the whole blob.
		if _, err := io.Copy(io.Discard, stream); err != nil {
			return layerErr(l, err)
		}
		if _, err := io.Copy(io.Discard, br); err != nil {
			return layerErr(l, err)
		}
		if err := blob.check(); err != nil {
			return err
		}
		if got := "sha256:" + hex.EncodeToString(diff.Sum(nil)); got != l.diffID {
			return fmt.Errorf("%w: layer %s unpacks to a tar with digest %s, not the config's diff id", ErrBadImage, l.diffID, got)
		}
		return nil
	}
	return &layerStream{tar: stream, finish: finish, close: func() { closeDec(); rc.Close() }}, nil
}

func layerErr(l layerBlob, err error) error {
	if errors.Is(err, ErrImageTooLarge) || errors.Is(err, ErrBadImage) {
		return err
	}
	return fmt.Errorf("%w: layer %s: %w", ErrBadImage, l.diffID, err)
}
