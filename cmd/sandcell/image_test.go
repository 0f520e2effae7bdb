package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/internal/version"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/service"
)

// entryScript is the test image's Entrypoint program: where it runs, with
// which arguments and environment.
const entryScript = "import os, sys; print('entry', os.getcwd(), sys.argv[1:], os.environ.get('IMG_VAR'), os.getuid())"

// pythonImageLayout writes an OCI layout of an image made of the python
// language's built layers and a layer of its own that deletes
// /usr/bin/python3 and puts python3 in /usr/local/bin instead (an absolute
// symlink, as images have), with a config naming its environment,
// entrypoint, working directory, user and things a sandbox ignores.
func pythonImageLayout(t *testing.T) string {
	t.Helper()
	cfg := ggcr.Config{
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "IMG_VAR=from-image", "HOME=/root"},
		Entrypoint:   []string{"/usr/bin/python3.11", "-c", entryScript},
		Cmd:          []string{"default-cmd"},
		WorkingDir:   "/app",
		User:         "nobody",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
	}
	return testutil.WriteLayout(t, filepath.Join(t.TempDir(), "layout"), testutil.OCIImage(t, cfg, pythonImageLayers(t)...), "pyimg:1")
}

// pythonImageLayers are the layers of pythonImageLayout's image.
func pythonImageLayers(t *testing.T) [][]byte {
	t.Helper()
	home := layerHome()
	py, err := rootfs.Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	store := &rootfs.Store{Dir: home}
	ms, err := store.Layers(py) // skeleton, python, base
	testutil.Require(t, err == nil, "python layers: %v (make layers builds them)", err)
	var layers [][]byte
	for _, m := range slices.Backward(ms[1:]) {
		layers = append(layers, testutil.TreeTar(t, filepath.Join(home, "rootfs/layers", strings.TrimPrefix(m.ID, "sha256:"), "root")))
	}
	layers = append(layers, testutil.TreeTar(t, t.TempDir(),
		tar.Header{Name: "usr/bin/.wh.python3", Typeflag: tar.TypeReg, Mode: 0o644},
		tar.Header{Name: "usr/local/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "usr/local/bin/python3", Typeflag: tar.TypeSymlink, Linkname: "/usr/bin/python3.11", Mode: 0o777},
		tar.Header{Name: "app/", Typeflag: tar.TypeDir, Mode: 0o755}))
	return layers
}

// imageHome is a sandcell home of the test's own, that a sandbox's mapped
// root can traverse.
func imageHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	for _, d := range []string{home, filepath.Dir(home)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { (&rootfs.Store{Dir: home}).Close() })
	return home
}

// TestImageRuns: an image imported with the CLI is a run environment for
// sandcell run (a language's program with the image's interpreter, found on
// its PATH; the image's own entrypoint in its working directory), for the
// MCP tools (execute_code and run_command with image, sessions and their
// kernels in an image, list_languages), and is listed, shown by doctor, removed and
// pruned.
func TestImageRuns(t *testing.T) {
	testutil.RequireRoot(t)
	home := imageHome(t)
	layout := pythonImageLayout(t)
	h := func(args ...string) (int, string, string) {
		return cli(t, "", append([]string{"--home", home}, args...)...)
	}

	code, out, errOut := h("image", "import", layout, "--name", "pyimg")
	if code != 0 {
		t.Fatalf("image import: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"imported pyimg: 3 layers (3 unpacked, 0 shared)", "not honoured in a sandbox: ExposedPorts",
		`runs as the sandbox user (uid 1000), not the image's user "nobody"`} {
		if !strings.Contains(out, want) {
			t.Errorf("image import output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = h("image", "list", "--json")
	var imgs []rootfs.Image
	if err := json.Unmarshal([]byte(out), &imgs); code != 0 || err != nil || len(imgs) != 1 || imgs[0].Name != "pyimg" || len(imgs[0].Layers) != 3 {
		t.Errorf("image list --json: exit %d %v: %s", code, err, out)
	}

	prog := "import os, sys\nprint(sys.executable, os.environ.get('IMG_VAR'), os.environ['HOME'], os.getcwd(), os.path.exists('/usr/bin/python3'), os.getuid())\n"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"language program", []string{"run", "--image", "pyimg", "--lang", "python", "--code", prog}, "/usr/local/bin/python3 from-image /work /work False 1000\n"},
		{"entrypoint and cmd", []string{"run", "--image", "pyimg"}, "entry /app ['default-cmd'] from-image 1000\n"},
		{"entrypoint and args", []string{"run", "--image", "pyimg", "--", "a", "b"}, "entry /app ['a', 'b'] from-image 1000\n"},
	} {
		code, out, errOut := h(c.args...)
		if code != 0 || out != c.want {
			t.Errorf("%s: exit %d, stdout %q, want %q; stderr %s", c.name, code, out, c.want, errOut)
		}
	}
	if code, _, errOut := h("run", "--image", "nope", "--lang", "python", "--code", "1"); code != exitInternal || !strings.Contains(errOut, "unknown image") {
		t.Errorf("unknown image: exit %d, %s", code, errOut)
	}
	if _, out, _ := h("languages"); !strings.Contains(out, "pyimg") {
		t.Errorf("languages does not show the image:\n%s", out)
	}
	_, out, _ = h("doctor", "--json")
	var doc struct {
		Checks []struct{ Name, Detail string }
	}
	json.Unmarshal([]byte(out), &doc)
	if i := slices.IndexFunc(doc.Checks, func(c struct{ Name, Detail string }) bool { return c.Name == "image store" }); i < 0 ||
		!strings.Contains(doc.Checks[i].Detail, "1 images") || !strings.Contains(doc.Checks[i].Detail, "pyimg") {
		t.Errorf("doctor does not show the image store: %s", out)
	}

	t.Run("mcp", func(t *testing.T) { imageMCP(t, home, prog) })

	if code, out, errOut := h("image", "rm", "pyimg"); code != 0 || !strings.Contains(out, "removed pyimg") {
		t.Errorf("image rm: exit %d %s %s", code, out, errOut)
	}
	code, out, errOut = h("rootfs", "prune")
	if code != 0 || strings.Count(out, "removed layer sha256:") != 3 {
		t.Errorf("rootfs prune after image rm: exit %d, want the image's 3 layers removed:\n%s%s", code, out, errOut)
	}
}

// TestImageMissingPaths: `sandcell run --image` in an image whose
// WorkingDir its layers lack runs there, as docker makes it (the import
// adds it); one whose Entrypoint program is missing is refused naming it,
// as the image's fault, not an internal error (issue #37).
func TestImageMissingPaths(t *testing.T) {
	testutil.RequireRoot(t)
	home := imageHome(t)
	layers := pythonImageLayers(t)
	h := func(args ...string) (int, string, string) {
		return cli(t, "", append([]string{"--home", home}, args...)...)
	}
	for name, cfg := range map[string]ggcr.Config{
		"pywd":    {Entrypoint: []string{"/usr/bin/python3.11", "-c", entryScript}, WorkingDir: "/srv/made"},
		"pynoent": {Entrypoint: []string{"/opt/none/run"}, WorkingDir: "/app"},
	} {
		layout := testutil.WriteLayout(t, filepath.Join(t.TempDir(), "layout"), testutil.OCIImage(t, cfg, layers...), name+":1")
		code, out, errOut := h("image", "import", layout, "--name", name)
		if code != 0 {
			t.Fatalf("image import %s: exit %d: %s", name, code, errOut)
		}
		if made := strings.Contains(out, "made its WorkingDir /srv/made, which its layers lack"); made != (name == "pywd") {
			t.Errorf("image import %s says it made the WorkingDir: %v, want %v:\n%s", name, made, name == "pywd", out)
		}
	}
	if code, out, errOut := h("run", "--image", "pywd", "--", "x"); code != 0 || out != "entry /srv/made ['x'] None 1000\n" {
		t.Errorf("run in an image whose WorkingDir its layers lack: exit %d, stdout %q; stderr %s", code, out, errOut)
	}
	code, _, errOut := h("run", "--image", "pynoent")
	if strings.Contains(errOut, "internal_error") || !strings.Contains(errOut, `cannot run in the image pynoent: its Entrypoint's program "/opt/none/run" is not an executable file in the image`) {
		t.Errorf("run in an image whose Entrypoint program is missing: exit %d, stderr %s", code, errOut)
	}
}

// imageMCP drives the MCP tools over a server whose home holds pyimg.
func imageMCP(t *testing.T, home, prog string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	state := testState(t)
	cfg := config.Default()
	cfg.StateDir, cfg.LayerDir, cfg.CgroupParent, cfg.AutoBuild = state, home, "/"+filepath.Base(state), false
	a, err := cfg.OpenExecutor(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ws, err := workspace.Open(filepath.Join(t.TempDir(), "sessions"), workspace.Options{
		UID: int(cfg.UIDBase) + oci.SandboxUID, GID: int(cfg.UIDBase) + oci.SandboxGID})
	if err != nil {
		t.Fatal(err)
	}
	conn := newMCPConn(t, service.NewServer(service.New(a.Executor, ws, nil, nil), service.ServerOptions{Version: version.String()}))
	call := func(tool string, args map[string]any) (map[string]any, bool) {
		t.Helper()
		r := conn.tool(t, ctx, tool, args)
		sc, _ := r["structuredContent"].(map[string]any)
		return sc, r["isError"] == true
	}
	stdout := func(sc map[string]any) string { return fmt.Sprint(sc["stdout"]) }

	if sc, isErr := call("execute_code", map[string]any{"language": "python", "source": prog, "image": "pyimg"}); isErr ||
		stdout(sc) != "/usr/local/bin/python3 from-image /work /work False 1000\n" {
		t.Errorf("execute_code in the image: %v", sc)
	}
	if sc, isErr := call("run_command", map[string]any{"image": "pyimg"}); isErr || stdout(sc) != "entry /app ['default-cmd'] from-image 1000\n" {
		t.Errorf("run_command in the image without a command (its entrypoint): %v", sc)
	}
	if sc, isErr := call("run_command", map[string]any{"image": "pyimg", "argv": []string{"python3", "-c", "print('on the image PATH')"}}); isErr ||
		stdout(sc) != "on the image PATH\n" {
		t.Errorf("run_command in the image: %v", sc)
	}
	if _, isErr := call("execute_code", map[string]any{"language": "python", "source": "1", "image": "pyimg", "dependencies": []string{"x"}}); !isErr {
		t.Error("execute_code with dependencies in an image: not refused")
	}
	sc, _ := call("list_languages", map[string]any{})
	if imgs, _ := sc["images"].([]any); len(imgs) != 1 || imgs[0].(map[string]any)["name"] != "pyimg" {
		t.Errorf("list_languages images: %v", sc["images"])
	}

	// A session in the image: its runs get the image unless they name
	// none other; its /work persists between them.
	sess, isErr := call("create_session", map[string]any{"language": "python", "image": "pyimg"})
	id, _ := sess["session_id"].(string)
	if isErr || id == "" || sess["image"] != "pyimg" {
		t.Fatalf("create_session in the image: %v", sess)
	}
	if sc, isErr := call("execute_code", map[string]any{"session_id": id, "language": "python",
		"source": "import os\nopen('/work/kept.txt', 'w').write(os.environ['IMG_VAR'])\n"}); isErr {
		t.Errorf("execute_code in the image session: %v", sc)
	}
	if sc, isErr := call("run_command", map[string]any{"session_id": id, "command": "cat /work/kept.txt; echo; python3 -c 'import sys; print(sys.executable)'"}); isErr ||
		!strings.HasPrefix(stdout(sc), "from-image") {
		// The image whites out nothing of busybox: sh -c works there.
		t.Errorf("run_command in the image session: %v", sc)
	}
	// The session's kernel is in its image too: the image's python3 (on
	// its PATH, not the catalogue's /usr/bin/python3, which the image
	// deletes) with the image's environment, and the session's /work.
	if sc, isErr := call("run_cell", map[string]any{"session_id": id,
		"code": "import os, sys\nprint(sys.executable, os.environ['IMG_VAR'], open('/work/kept.txt').read())"}); isErr ||
		stdout(sc) != "/usr/local/bin/python3 from-image from-image\n" {
		t.Errorf("run_cell in the image session: %v", sc)
	}
	if _, isErr := call("create_session", map[string]any{"image": "nope"}); !isErr {
		t.Error("create_session with an unknown image: not refused")
	}
}
