package rootfs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/sandcell/sandcell/internal/testutil"
)

// The images of these tests are made here: layer tars written entry by
// entry with archive/tar (hostile ones included), packed into OCI layouts
// and docker save archives by go-containerregistry (internal/testutil),
// an implementation independent of sandcell's reader.

// ent is one entry of a test layer.
type ent struct {
	name, body, link string
	typ              byte
	mode             int64
	uid              int
	pax              map[string]string
}

func dirE(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func fileE(name, body string) ent { return ent{name: name, body: body, typ: tar.TypeReg, mode: 0o644} }
func linkE(name, target string) ent {
	return ent{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}
func hardE(name, target string) ent {
	return ent{name: name, link: target, typ: tar.TypeLink, mode: 0o644}
}
func whiteoutE(dir, victim string) ent     { return fileE(filepath.Join(dir, ".wh."+victim), "") }
func opaqueE(dir string) ent               { return fileE(filepath.Join(dir, ".wh..wh..opq"), "") }
func modeE(e ent, mode int64) ent          { e.mode = mode; return e }
func tarOf(t testing.TB, es ...ent) []byte { return tarWith(t, nil, es...) }

// tarWith writes es as a tar, then trailer (bytes after the end-of-archive
// blocks, which a diff id covers).
func tarWith(t testing.TB, trailer []byte, es ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: mtime, Size: int64(len(e.body)), PAXRecords: e.pax, Format: tar.FormatPAX}
		if e.typ == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return append(buf.Bytes(), trailer...)
}

// tarDir packs dir (an OCI layout) into an archive, as skopeo's
// oci-archive: transport does.
func tarDir(t testing.TB, dir, file string) string {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return file
}

// treeOf describes every entry under dir that is not the skeleton's:
// "d MODE", "f MODE CONTENT", "l TARGET", "o TYPE", by slash path.
func treeOf(t testing.TB, dir string) map[string]string {
	t.Helper()
	skel := map[string]bool{}
	for _, mp := range append(Mountpoints(), "/etc") {
		skel[mp[1:]] = true
	}
	for f := range skeletonFiles {
		skel[f] = true
	}
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || skel[rel] {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch m := fi.Mode(); {
		case m.IsDir():
			perm := m.Perm()
			if m&fs.ModeSticky != 0 {
				perm |= 0o1000
			}
			out[rel] = fmt.Sprintf("d %o", perm)
		case m.IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("f %o %s", m.Perm()|m&(fs.ModeSetuid|fs.ModeSetgid), b)
		case m&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "l " + target
		default:
			out[rel] = "o " + m.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffTree(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok && !yield(k) {
				return
			}
		}
	}) {
		if got[k] != want[k] {
			t.Errorf("%s: /%s is %q, want %q", what, k, got[k], want[k])
		}
	}
}

func inodeOf(t testing.TB, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// multiLayers are three layers exercising what the spec says about
// applying layers: whiteouts of a file and of a directory, an opaque
// directory, a directory deleted and made again in one layer, hard links,
// a symlink chain (relative and absolute).
func multiLayers(t testing.TB) [][]byte {
	l1 := tarOf(t,
		dirE("app"), fileE("app/keep.txt", "kept from layer 1\n"), fileE("app/gone.txt", "deleted by layer 2\n"),
		dirE("app/olddir"), fileE("app/olddir/a.txt", "a directory deleted by layer 2\n"),
		dirE("app/opq"), fileE("app/opq/x.txt", "hidden by layer 3's opaque marker\n"),
		dirE("app/re"), fileE("app/re/old.txt", "deleted with its directory, which layer 3 makes again\n"),
		dirE("bin"), modeE(fileE("bin/tool", "#!/bin/sh\necho tool\n"), 0o700),
		dirE("data"), fileE("data/orig.bin", "\x00\x01binary\xff"), hardE("data/hard", "data/orig.bin"),
		linkE("app/l1", "l2"), linkE("app/l2", "sub/../l3"), linkE("app/l3", "/app/keep.txt"),
		dirE("usr"), dirE("usr/local"), dirE("usr/local/bin"), linkE("usr/local/bin/tool", "/bin/tool"),
		modeE(dirE("scratch"), 0o1777),
	)
	l2 := tarOf(t,
		dirE("app"), whiteoutE("app", "gone.txt"), whiteoutE("app", "olddir"), fileE("app/new.txt", "added by layer 2\n"),
		fileE("data/orig.bin", "replaced by layer 2"),
	)
	l3 := tarOf(t,
		dirE("app/opq"), opaqueE("app/opq"), fileE("app/opq/y.txt", "layer 3's own\n"),
		whiteoutE("app", "re"), dirE("app/re"), fileE("app/re/new.txt", "the new re\n"),
		fileE("app/h1", "hard-linked in layer 3\n"), hardE("app/h2", "app/h1"),
	)
	return [][]byte{l1, l2, l3}
}

// multiWant is the merged tree of multiLayers.
var multiWant = map[string]string{
	"app":                "d 755",
	"app/keep.txt":       "f 644 kept from layer 1\n",
	"app/new.txt":        "f 644 added by layer 2\n",
	"app/opq":            "d 755",
	"app/opq/y.txt":      "f 644 layer 3's own\n",
	"app/re":             "d 755",
	"app/re/new.txt":     "f 644 the new re\n",
	"app/h1":             "f 644 hard-linked in layer 3\n",
	"app/h2":             "f 644 hard-linked in layer 3\n",
	"app/l1":             "l l2",
	"app/l2":             "l sub/../l3",
	"app/l3":             "l /app/keep.txt",
	"bin":                "d 755",
	"bin/tool":           "f 755 #!/bin/sh\necho tool\n",
	"data":               "d 755",
	"data/orig.bin":      "f 644 replaced by layer 2",
	"data/hard":          "f 644 \x00\x01binary\xff",
	"usr":                "d 755",
	"usr/local":          "d 755",
	"usr/local/bin":      "d 755",
	"usr/local/bin/tool": "l /bin/tool",
	"scratch":            "d 1777",
}

func TestImportMultiLayer(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := fakeStore(t)
	work := t.TempDir()
	cfg := ggcr.Config{Env: []string{"PATH=/usr/local/bin:/bin", "HOME=/root", "LANG=C"}, Entrypoint: []string{"/bin/tool"},
		Cmd: []string{"--help"}, WorkingDir: "/app", User: "app", ExposedPorts: map[string]struct{}{"80/tcp": {}},
		Volumes: map[string]struct{}{"/data": {}}, Healthcheck: &ggcr.HealthConfig{Test: []string{"CMD", "true"}}}
	img := testutil.OCIImage(t, cfg, multiLayers(t)...)
	lay := testutil.WriteLayout(t, filepath.Join(work, "layout"), img, "multi:1")

	got, err := s.ImportImage(ctx, lay, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "multi:1" || got.Source != SourceOCILayout || len(got.Layers) != 3 || got.Report.Unpacked != 3 || got.Report.Shared != 0 {
		t.Errorf("imported %+v: want multi:1 from an oci-layout, 3 layers unpacked", got)
	}
	if got.Report.Whiteouts != 2 || got.Report.Opaque != 2 || got.Report.Neutralised.Total() != 0 {
		t.Errorf("report %+v: want 2 whiteouts (gone.txt, olddir), 2 opaque directories (opq; re, deleted and made again), nothing neutralised", got.Report)
	}
	wantCfg := ImageConfig{Env: []string{"PATH=/usr/local/bin:/bin", "LANG=C"}, Entrypoint: []string{"/bin/tool"}, Cmd: []string{"--help"},
		WorkingDir: "/app", User: "app", Ignored: []string{"ExposedPorts", "Healthcheck", "Volumes"}}
	if fmt.Sprint(got.Config) != fmt.Sprint(wantCfg) {
		t.Errorf("config %+v, want %+v (HOME dropped; ports, volumes, healthcheck named as ignored)", got.Config, wantCfg)
	}

	root, rimg, err := s.ImageRoot("multi:1")
	if err != nil {
		t.Fatal(err)
	}
	if rimg.ConfigDigest != got.ConfigDigest || !strings.HasPrefix(root, s.Dir+"/rootfs/roots/") {
		t.Errorf("ImageRoot = %s, %s", root, rimg.ConfigDigest)
	}
	diffTree(t, "assembled root", treeOf(t, root), multiWant)
	if inodeOf(t, filepath.Join(root, "app/h1")) != inodeOf(t, filepath.Join(root, "app/h2")) {
		t.Error("app/h1 and app/h2 are not one file (a hard link of one layer)")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !strings.Contains(string(b), "sandbox:x:1000") {
		t.Errorf("/etc/passwd is not the skeleton's: %q", b)
	}
	if err := os.WriteFile(filepath.Join(root, "app/x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing into the image root: %v, want EROFS", err)
	}
	if err := s.VerifyImage(ctx, "multi:1"); err != nil {
		t.Errorf("VerifyImage: %v", err)
	}

	// The same image as a docker save archive and as an OCI archive:
	// its layers are shared (nothing unpacked again), its root the same.
	for _, src := range []struct{ path, name, kind string }{
		{testutil.WriteDockerArchive(t, filepath.Join(work, "docker.tar"), img, "example.com/team/multi:2"), "", SourceDockerArchive},
		{tarDir(t, lay, filepath.Join(work, "oci.tar")), "multi-archive", SourceOCIArchive},
	} {
		again, err := s.ImportImage(ctx, src.path, ImportOptions{Name: src.name})
		if err != nil {
			t.Fatalf("%s: %v", src.kind, err)
		}
		if again.Source != src.kind || again.Report.Shared != 3 || again.Report.Unpacked != 0 || !slices.Equal(again.Layers, got.Layers) {
			t.Errorf("%s: %+v, want the same 3 layers, all shared", src.kind, again)
		}
		r2, _, err := s.ImageRoot(again.Name)
		if err != nil || r2 != root {
			t.Errorf("%s: root %s, %v; want the same mount %s", src.kind, r2, err, root)
		}
	}
	if imgs, err := s.Images(); err != nil || len(imgs) != 3 || imgs[0].Name != "example.com/team/multi:2" {
		t.Errorf("Images = %v, %v; want 3, sorted by name", imgs, err)
	}

	// A modified layer is noticed.
	layer := filepath.Join(s.Dir, "rootfs/images/layers", hexID(got.Layers[0]), "root")
	if err := os.WriteFile(filepath.Join(layer, "app/keep.txt"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.VerifyImage(ctx, "multi:1"); !errors.Is(err, ErrModified) {
		t.Errorf("VerifyImage after tampering: %v, want ErrModified", err)
	}

	// rm keeps the shared root and layers; prune removes layers only
	// when no image uses them.
	if err := s.RemoveImage(ctx, "multi:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Image("multi:1"); !errors.Is(err, ErrUnknownImage) {
		t.Errorf("Image after rm: %v, want ErrUnknownImage", err)
	}
	if res, err := s.Prune(ctx); err != nil || len(res.Layers) != 0 {
		t.Errorf("Prune with two images left: removed %v, %v; want nothing", res.Layers, err)
	}
	for _, n := range []string{"example.com/team/multi:2", "multi-archive"} {
		if err := s.RemoveImage(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Prune(ctx)
	if err != nil || len(res.Layers) != 3 {
		t.Errorf("Prune with no image: removed %v, %v; want the 3 image layers", res.Layers, err)
	}
	if n := mountCount(t, root); n != 0 {
		t.Errorf("%d mounts left at %s after the images were removed", n, root)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir, "rootfs/locks")); len(ents) != 0 {
		t.Errorf("rootfs/locks holds %v after the images were removed and pruned; want nothing", ents)
	}
}

func TestImportHostile(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	top := t.TempDir()
	s := &Store{Dir: filepath.Join(top, "store")}
	t.Cleanup(func() { s.Close() })
	// world holds what the hostile entries aim at: the image file and a
	// directory outside the store.
	world := filepath.Join(top, "world")
	outside := filepath.Join(world, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("untouched\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostAbs := filepath.Join("/", fmt.Sprintf("sandcell-hostile-%d", time.Now().UnixNano()))
	up := strings.Repeat("../", 20)
	dev := ent{name: "dev/evil", typ: tar.TypeChar, mode: 0o666}
	layer := tarOf(t,
		fileE(hostAbs, "an absolute path\n"),
		fileE(up+strings.TrimPrefix(outside, "/")+"/climbed", "climbed out with ..\n"),
		linkE("escape", outside),
		fileE("escape/victim", "written through a symlink\n"),
		linkE("up", up+strings.TrimPrefix(outside, "/")),
		fileE("up/through-relative", "written through a relative symlink\n"),
		dirE("d"), linkE("d/inner", "/"), fileE("d/inner"+outside+"/deep", "through a symlink to /\n"),
		hardE("hl", up+"etc/passwd"), hardE("hl-abs", "/etc/passwd"), hardE("hl-lower", "not/in/this/layer"),
		dirE("bin"), modeE(fileE("bin/su", "setuid\n"), 0o4755), modeE(fileE("bin/sg", "setgid\n"), 0o2711),
		modeE(dirE("sgid-dir"), 0o2775),
		dirE("dev"), dev,
		ent{name: "fifo", typ: tar.TypeFifo, mode: 0o644},
		ent{name: "owned.txt", body: "owned by a foreign uid\n", typ: tar.TypeReg, mode: 0o600, uid: 4000000},
		ent{name: "cap.bin", body: "file capabilities\n", typ: tar.TypeReg, mode: 0o755,
			pax: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}},
		fileE("ok.txt", "the one plain file\n"),
	)
	img := testutil.OCIImage(t, ggcr.Config{}, layer)
	archive := testutil.WriteDockerArchive(t, filepath.Join(world, "hostile.tar"), img, "hostile:1")
	before := snapshot(t, world)
	got, err := s.ImportImage(ctx, archive, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := Neutralised{PathsOutside: 2, ThroughSymlink: 3, LinksOutside: 3, Devices: 1, Special: 1, SetID: 3, Owners: 1, Xattrs: 1}
	if got.Report.Neutralised != want {
		t.Errorf("neutralised %+v, want %+v", got.Report.Neutralised, want)
	}
	if _, err := os.Lstat(hostAbs); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s on the host: %v; the absolute entry was written outside the store", hostAbs, err)
	}
	checkUnchanged(t, "outside the store", before, snapshot(t, world))

	root, _, err := s.ImageRoot("hostile:1")
	if err != nil {
		t.Fatal(err)
	}
	diffTree(t, "hostile root", treeOf(t, root), map[string]string{
		"escape":    "l " + outside,
		"up":        "l " + up + strings.TrimPrefix(outside, "/"),
		"d":         "d 755",
		"d/inner":   "l /",
		"bin":       "d 755",
		"bin/su":    "f 755 setuid\n",
		"bin/sg":    "f 755 setgid\n",
		"sgid-dir":  "d 775",
		"owned.txt": "f 644 owned by a foreign uid\n",
		"cap.bin":   "f 755 file capabilities\n",
		"ok.txt":    "f 644 the one plain file\n",
		// dev is the skeleton's mountpoint; the device node is not there.
	})
	if ents, _ := os.ReadDir(filepath.Join(root, "dev")); len(ents) != 0 {
		t.Errorf("/dev of the root holds %v; the device node was made", ents)
	}
	lroot := filepath.Join(s.Dir, "rootfs/images/layers", hexID(got.Layers[0]), "root")
	for _, p := range []string{"owned.txt", "cap.bin", "bin/su"} {
		fi, err := os.Lstat(filepath.Join(lroot, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want the store's owner 0:0", p, st.Uid, st.Gid)
		}
		if n, _ := syscall.Getxattr(filepath.Join(lroot, p), "security.capability", make([]byte, 64)); n > 0 {
			t.Errorf("%s kept security.capability", p)
		}
	}
}

// gnuSparse is a tar holding one GNU sparse file of apparent size size
// whose only data is its last byte: a few blocks of archive.
func gnuSparse(name string, size int64) []byte {
	h := make([]byte, 512)
	copy(h[0:], name)
	copy(h[100:], "0000644\x00")
	copy(h[108:], "0000000\x00")
	copy(h[116:], "0000000\x00")
	copy(h[124:], "00000000001\x00") // one byte stored
	copy(h[136:], "00000000000\x00")
	h[156] = 'S'
	copy(h[257:], "ustar  \x00")
	base256 := func(field []byte, v int64) {
		field[0] = 0x80
		binary.BigEndian.PutUint64(field[len(field)-8:], uint64(v))
	}
	base256(h[386:398], size-1) // sparse[0].offset
	copy(h[398:], "00000000001\x00")
	base256(h[483:495], size) // realsize
	for i := 148; i < 156; i++ {
		h[i] = ' '
	}
	sum := 0
	for _, b := range h {
		sum += int(b)
	}
	copy(h[148:], fmt.Sprintf("%06o\x00 ", sum))
	data := make([]byte, 512)
	data[0] = 'x'
	return append(append(h, data...), make([]byte, 1024)...)
}

// gzipZeros is a gzip stream of a tar and n zero bytes after it: a
// decompression bomb of ratio about 1000.
func gzipZeros(t testing.TB, head []byte, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(head)
	if _, err := io.CopyN(zw, zeroReader{}, n); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestImportBounds(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	top := t.TempDir()
	s := &Store{Dir: filepath.Join(top, "store")}
	t.Cleanup(func() { s.Close() })
	deep := strings.Repeat("d/", 200) + "f"
	many := make([]ent, 2000)
	for i := range many {
		many[i] = fileE(fmt.Sprintf("f%04d", i), "")
	}
	// A tar of one 128 MiB file of zeros, gzipped: 130 KB of blob, against
	// a 16 MiB bound (a ratio of 1000, as a real bomb's).
	var big bytes.Buffer // the header alone: gzipZeros writes the content
	if err := tar.NewWriter(&big).WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: 128 << 20}); err != nil {
		t.Fatal(err)
	}
	bigHdr := big.Bytes()
	cases := []struct {
		name  string
		layer func() []byte // raw layer blob given to go-containerregistry (gzipped if not yet)
		opts  ImportOptions
		want  string
	}{
		{"sparse-10GB", func() []byte { return gnuSparse("sparse", 10<<30) }, ImportOptions{}, "apparent size"},
		{"bomb-one-file", func() []byte { return gzipZeros(t, bigHdr, 128<<20) }, ImportOptions{MaxBytes: 16 << 20}, "apparent size"},
		{"bomb-after-the-tar", func() []byte { return gzipZeros(t, tarOf(t, fileE("small", "x")), 128<<20) }, ImportOptions{MaxBytes: 16 << 20}, "decompression bomb"},
		{"entries", func() []byte { return tarOf(t, many...) }, ImportOptions{MaxEntries: 1000}, "more than 1000 entries"},
		{"depth", func() []byte { return tarOf(t, fileE(deep, "deep")) }, ImportOptions{}, "directories deep"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(top, c.name+".tar")
			testutil.WriteDockerArchive(t, file, testutil.OCIImage(t, ggcr.Config{}, c.layer()), "bounds:"+c.name)
			_, err := s.ImportImage(ctx, file, c.opts)
			if !errors.Is(err, ErrImageTooLarge) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("import: %v; want ErrImageTooLarge saying %q", err, c.want)
			}
			noneKept(t, s)
		})
	}
	// The store never held more than a bound's worth: its disk use is
	// a few MB, not the 10 GB the sparse file claims.
	var used int64
	filepath.WalkDir(s.Dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				used += fi.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		return nil
	})
	if used > 100<<20 {
		t.Errorf("the store uses %d bytes after refused imports", used)
	}
}

// TestImportBudgetBeforeWriting: nine sparse files of 32 MiB each (a few
// KB of tar) against a budget of 256 MiB are refused before a byte of
// them is written: the headers of every layer are read and summed first
// (issue #37: nine 1 GiB files were refused only after 8.6 GB were
// written).
func TestImportBudgetBeforeWriting(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	top := t.TempDir()
	s := &Store{Dir: filepath.Join(top, "store")}
	t.Cleanup(func() { s.Close() })
	const size = 32 << 20
	var layer []byte
	for i := range 9 {
		f := gnuSparse(fmt.Sprintf("f%d", i), size)
		layer = append(layer, f[:len(f)-1024]...) // without the end-of-archive blocks
	}
	layer = append(layer, make([]byte, 1024)...)
	// A first layer that fits, so that the refused one is not the first.
	file := testutil.WriteDockerArchive(t, filepath.Join(top, "sparse.tar"),
		testutil.OCIImage(t, ggcr.Config{}, tarOf(t, fileE("small", "x")), layer), "sparse:9")
	before := procWritten(t)
	_, err := s.ImportImage(ctx, file, ImportOptions{MaxBytes: 8 * size})
	written := procWritten(t) - before
	t.Logf("refused: %v (%d bytes written)", err, written)
	if !errors.Is(err, ErrImageTooLarge) || !strings.Contains(err.Error(), "as their tar headers declare") || !strings.Contains(err.Error(), `"f7"`) {
		t.Errorf("import: %v; want ErrImageTooLarge naming the headers' total and the entry past the budget (f7: the first layer took a byte)", err)
	}
	if written > size {
		t.Errorf("the refused import wrote %d bytes, more than one of its files (%d)", written, size)
	}
	noneKept(t, s)
}

// noneKept checks that a refused import kept nothing: no layer, no
// record, no temporary tree.
func noneKept(t testing.TB, s *Store) {
	t.Helper()
	for _, sub := range []string{"rootfs/tmp", "rootfs/images/layers", "rootfs/images/refs"} {
		if ents, _ := os.ReadDir(filepath.Join(s.Dir, sub)); len(ents) != 0 {
			t.Errorf("%s holds %d entries after a refused import", sub, len(ents))
		}
	}
}

// procWritten is the bytes this process passed to write(2) and the like
// (/proc/self/io's wchar, all threads).
func procWritten(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatalf("no wchar in /proc/self/io: %s", b)
	return 0
}

func TestImportRefusesBadImages(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	top := t.TempDir()
	s := &Store{Dir: filepath.Join(top, "store")}
	img := testutil.OCIImage(t, ggcr.Config{}, tarOf(t, fileE("a", "a")))
	lay := testutil.WriteLayout(t, filepath.Join(top, "layout"), img, "ok")
	// A layer blob changed after the manifest was written.
	m, _ := img.Manifest()
	blob := filepath.Join(lay, "blobs/sha256", m.Layers[0].Digest.Hex)
	data, _ := os.ReadFile(blob)
	os.Chmod(blob, 0o644)
	data[len(data)-9] ^= 0xff // the gzip trailer's CRC: the content still decompresses
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportImage(ctx, lay, ImportOptions{}); !errors.Is(err, ErrBadImage) {
		t.Errorf("tampered blob: %v, want ErrBadImage", err)
	}
	arm := testutil.OCIImage(t, ggcr.Config{}, tarOf(t, fileE("a", "a")))
	cf, _ := arm.ConfigFile()
	cf = cf.DeepCopy()
	cf.Architecture = "arm64"
	arm, _ = mutate.ConfigFile(arm, cf)
	if runtime.GOARCH != "arm64" {
		_, err := s.ImportImage(ctx, testutil.WriteDockerArchive(t, filepath.Join(top, "arm.tar"), arm, "arm:1"), ImportOptions{})
		if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "arm64") {
			t.Errorf("arm64 image: %v, want ErrBadImage naming the platform", err)
		}
	}
	if _, err := s.ImportImage(ctx, top, ImportOptions{}); !errors.Is(err, ErrBadImage) {
		t.Errorf("a directory that is no image: %v, want ErrBadImage", err)
	}
	if _, err := s.ImportImage(ctx, lay, ImportOptions{Name: "bad name"}); !errors.Is(err, ErrBadImage) {
		t.Errorf("bad name: %v, want ErrBadImage", err)
	}
}

func TestCleanRemovesKilledImports(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	h := strings.Repeat("ab", 32)
	for _, n := range []string{"imglayer-" + h + "-0a0b0c", "imgref-" + h + "-0d0e0f"} {
		if err := os.MkdirAll(filepath.Join(s.Dir, "rootfs/tmp", n, "root"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "rootfs/locks"), 0o755); err != nil {
		t.Fatal(err)
	}
	// One import still runs (its lock is held): its directory stays.
	unlock, ok, err := tryLock(filepath.Join(s.Dir, "rootfs/locks/imgref-"+h+".lock"))
	if err != nil || !ok {
		t.Fatal(err)
	}
	defer unlock()
	if err := s.Clean(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir, "rootfs/tmp"))
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "imgref-") {
		t.Errorf("tmp after Clean: %v; want only the running import's", ents)
	}
}

// TestCatalogueImageLanguage: the catalogue may name an imported image as
// a language's root (data: an "image" entry with no packages).
func TestCatalogueImageLanguage(t *testing.T) {
	requireRoot(t)
	var c map[string]any
	if err := json.Unmarshal(languagesJSON, &c); err != nil {
		t.Fatal(err)
	}
	entry := map[string]any{"name": "py-img", "image": "team/python:3", "source": "main.py",
		"run": []string{"/usr/bin/python3", "/work/main.py"}, "version": []string{"/usr/bin/python3", "--version"}}
	parse := func(extra map[string]any) (catalogue, error) {
		c := maps.Clone(c)
		c["languages"] = append(slices.Clone(c["languages"].([]any)), extra)
		data, _ := json.Marshal(c)
		return parseCatalogue(data)
	}
	cat, err := parse(entry)
	if err != nil {
		t.Fatalf("a language with an image: %v", err)
	}
	bad := maps.Clone(entry)
	bad["packages"] = []string{"python3"}
	if _, err := parse(bad); err == nil {
		t.Error("a language with both an image and packages was accepted")
	}
	lang := cat.Languages[len(cat.Languages)-1]

	ctx := context.Background()
	s := fakeStore(t)
	st, err := s.Status(lang)
	if err != nil || st.Built || st.Image != "team/python:3" {
		t.Errorf("Status before the import: %+v, %v; want not built, image named", st, err)
	}
	if _, err := s.Root(lang); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "sandcell image import PATH --name team/python:3") {
		t.Errorf("Root before the import: %v; want ErrNotBuilt naming the import", err)
	}
	if err := s.Build(ctx, lang); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Build of an image language: %v; want ErrNotBuilt (an image is imported, not built)", err)
	}
	img := testutil.OCIImage(t, ggcr.Config{}, tarOf(t, fileE("usr/bin/python3", "not really\n")))
	if _, err := s.ImportImage(ctx, testutil.WriteLayout(t, filepath.Join(t.TempDir(), "l"), img, "x"), ImportOptions{Name: "team/python:3"}); err != nil {
		t.Fatal(err)
	}
	root, err := s.Root(lang)
	imgRoot, _, ierr := s.ImageRoot("team/python:3")
	if err != nil || ierr != nil || root != imgRoot {
		t.Errorf("Root of the image language = %s, %v; want the image's root %s, %v", root, err, imgRoot, ierr)
	}
	if st, err := s.Status(lang); err != nil || !st.Built || st.Layer == "" {
		t.Errorf("Status after the import: %+v, %v", st, err)
	}
	if err := s.Verify(ctx, lang); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

// TestImageLayersClosedToHostUsers: an image's world-writable directories
// and files keep their modes in the sandbox's view, but no other host user
// can reach them in the store: a layer's directory is 0700 (issue #37).
// A store whose layer directory is open (imported before) is closed when
// its root is mounted.
func TestImageLayersClosedToHostUsers(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	top := t.TempDir()
	for _, d := range []string{top, filepath.Dir(top)} {
		if err := os.Chmod(d, 0o755); err != nil { // traversable, as a store's parents are
			t.Fatal(err)
		}
	}
	s := &Store{Dir: filepath.Join(top, "store")}
	t.Cleanup(func() { s.Close() })
	img := testutil.OCIImage(t, ggcr.Config{}, tarOf(t, modeE(dirE("pub"), 0o777), modeE(fileE("pub/f", "x"), 0o666)))
	got, err := s.ImportImage(ctx, testutil.WriteLayout(t, filepath.Join(top, "layout"), img, "open:1"), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(s.Dir, "rootfs/images/layers", hexID(got.Layers[0]))
	asNobody := func() {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", `echo >"$1/pub/new" || echo >>"$1/pub/f"`, "sh", filepath.Join(layer, "root"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("another host user (uid 65534) wrote into the imported layer at %s: %s", layer, out)
		}
		if fi, err := os.Stat(layer); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("layer directory %s: %v %v, want mode 0700", layer, fi.Mode(), err)
		}
	}
	asNobody()
	root, _, err := s.ImageRoot("open:1")
	if err != nil {
		t.Fatal(err)
	}
	diffTree(t, "the sandbox's view", treeOf(t, root), map[string]string{"pub": "d 777", "pub/f": "f 666 x"})

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(layer, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ImageRoot("open:1"); err != nil {
		t.Fatal(err)
	}
	asNobody()
}

// TestImportMakesMissingWorkingDir: an image whose WorkingDir its layers
// lack gets it, as docker makes it when a container starts (issue #37: a
// run in it ended in internal_error), in a layer of sandcell's on top of
// the image's: a directory of root, mode 0755, below the real path of a
// symlink on the way; the parents it has keep their modes. An image that
// has its WorkingDir, or names one below a runtime mountpoint, gets none.
func TestImportMakesMissingWorkingDir(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := fakeStore(t)
	work := t.TempDir()
	layer := tarOf(t, modeE(dirE("opt"), 0o775), linkE("data", "/opt"), dirE("app"), fileE("app/file", "x"))
	for _, c := range []struct {
		wd   string
		want map[string]string // the root's entries besides the layer's; nil: no layer of sandcell's
	}{
		{"/srv/app", map[string]string{"srv": "d 755", "srv/app": "d 755"}},
		{"/data/sub/dir", map[string]string{"opt/sub": "d 755", "opt/sub/dir": "d 755"}},
		{"/app", nil},
		{"/app/file", nil},
		{"/work/app", nil},
	} {
		name := "wd" + strings.ReplaceAll(c.wd, "/", "-")
		img := testutil.OCIImage(t, ggcr.Config{WorkingDir: c.wd, Entrypoint: []string{"/bin/sh"}}, layer)
		got, err := s.ImportImage(ctx, testutil.WriteLayout(t, filepath.Join(work, name), img, name+":1"), ImportOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.wd, err)
		}
		if (got.Workdir != "") != (c.want != nil) || len(got.Layers) != 1 {
			t.Errorf("%s: Workdir %q, layers %v; want a layer of sandcell's: %v", c.wd, got.Workdir, got.Layers, c.want != nil)
		}
		root, _, err := s.ImageRoot(got.Name)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"opt": "d 775", "data": "l /opt", "app": "d 755", "app/file": "f 644 x"}
		maps.Copy(want, c.want)
		diffTree(t, c.wd, treeOf(t, root), want)
		if err := s.VerifyImage(ctx, got.Name); err != nil {
			t.Errorf("%s: VerifyImage: %v", c.wd, err)
		}
	}
	for _, img := range []string{"wd-srv-app", "wd-data-sub-dir", "wd-app", "wd-app-file", "wd-work-app"} {
		if err := s.RemoveImage(ctx, img+":1"); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := s.Prune(ctx); err != nil || len(res.Layers) != 3 {
		t.Errorf("Prune with no image: removed %v, %v; want the image's layer and sandcell's two", res.Layers, err)
	}
}
