package backend_test

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// pythonInImage, when set, is the root newRequest gives "python" runs
// instead of the language's layers (TestIsolationProbesInImage).
var pythonInImage string

// pythonImageRoot imports, into a store of its own, an OCI image made of
// the python language's built layers (base, then python) and returns the
// image's mounted root: the same files as the python layer's root,
// reached through an imported image. With whiteout, a third layer whites
// out /bin/busybox (the image then has no shell, like a distroless one,
// and a warm pool could not launch in it).
func pythonImageRoot(t testing.TB, whiteout bool) string {
	t.Helper()
	dir := os.Getenv("SANDCELL_LAYER_DIR")
	if dir == "" {
		dir = rootfs.DefaultDir()
	}
	layerRoot(t, "python") // built, or fail in CI
	py, err := rootfs.Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := layerStore(dir).Layers(py) // skeleton, python, base
	if err != nil {
		t.Fatal(err)
	}
	var layers [][]byte
	for _, m := range slices.Backward(ms[1:]) {
		layers = append(layers, testutil.TreeTar(t, filepath.Join(dir, "rootfs/layers", strings.TrimPrefix(m.ID, "sha256:"), "root")))
	}
	if whiteout {
		layers = append(layers, testutil.TreeTar(t, t.TempDir(), tar.Header{Name: "bin/.wh.busybox", Typeflag: tar.TypeReg, Mode: 0o644}))
	}
	home := t.TempDir()
	// The sandbox's root (a user namespace's) must traverse the store.
	for _, d := range []string{home, filepath.Dir(home)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := &rootfs.Store{Dir: home}
	t.Cleanup(func() { s.Close() })
	img := testutil.OCIImage(t, ggcr.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, layers...)
	if _, err := s.ImportImage(context.Background(), testutil.WriteLayout(t, filepath.Join(t.TempDir(), "layout"), img, "python-image"), rootfs.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	root, _, err := s.ImageRoot("python-image")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestIsolationProbesInImage: a program in an imported image passes the
// same isolation probes as in a language's layers (TestIsolationProbes,
// run again with the image as python's root): the image changes the root
// filesystem, never the lock-down.
func TestIsolationProbesInImage(t *testing.T) {
	testutil.RequireRoot(t)
	root := pythonImageRoot(t, true)
	e := newTestEnv(t)
	// The run is the image's: its whiteout hides the base layer's busybox.
	res := e.run(t, "python", "import os\nprint(os.path.exists('/bin/busybox'))\n", limits.Set{}, func(r *oci.Request) { r.Root = root })
	if res.Status != "ok" || res.Stdout != "False\n" {
		t.Fatalf("python in the image: %s %q %q; want /bin/busybox whited out", res.Status, res.Stdout, res.Stderr)
	}
	pythonInImage = root
	defer func() { pythonInImage = "" }()
	TestIsolationProbes(t)
}

// BenchmarkImageRoot compares runs in imported images with runs in the
// language's layers, the same python files either way: "image" has the
// language's two layers as its own (the same overlay of three lower
// directories), "image3" one more (a whiteout layer); "layer-again" is
// the layer's root once more, a control: its ratio to "layer" is the
// measurement's noise. The runs alternate
// in one loop, in a rotating order, so that the machine's noise falls on
// all of them alike. It reports
// the median wall time of each (oci.Run of python3 -c 'print(1)', fresh
// containers) and the ratios to the layer's.
func BenchmarkImageRoot(b *testing.B) {
	testutil.RequireRoot(b)
	roots := []struct {
		name, root string
		times      []time.Duration
	}{{name: "layer", root: layerRoot(b, "python")}, {name: "layer-again", root: layerRoot(b, "python")},
		{name: "image", root: pythonImageRoot(b, false)}, {name: "image3", root: pythonImageRoot(b, true)}}
	e := newTestEnv(b)
	lim := testLimits(b, limits.Set{})
	run := func(root string) time.Duration {
		start := time.Now()
		res, err := oci.Run(context.Background(), e.rt, &oci.Request{Root: root, Args: []string{"/usr/bin/python3", "-c", "print(1)"}, Limits: lim})
		if err != nil || res.Stdout != "1\n" {
			b.Fatalf("run: %v %s %q", err, res.Status, res.Stderr)
		}
		return time.Since(start)
	}
	for _, r := range roots {
		run(r.root) // page caches warm for all
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range roots { // a rotating order: no root always runs first
			j := (i + k) % len(roots)
			roots[j].times = append(roots[j].times, run(roots[j].root))
		}
	}
	b.StopTimer()
	base := median(roots[0].times)
	for _, r := range roots {
		m := median(r.times)
		b.ReportMetric(float64(m.Microseconds())/1000, r.name+"-ms")
		if r.name != "layer" {
			b.ReportMetric(float64(m)/float64(base), r.name+"/layer")
		}
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
