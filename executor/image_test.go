package executor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/rootfs"
)

// TestImageMissingPaths: an image whose Entrypoint program or WorkingDir
// it does not have is refused as the image's fault, naming the path,
// before any sandbox starts (issue #37: the run ended in internal_error).
func TestImageMissingPaths(t *testing.T) {
	r := newRig(t)
	path := []string{"PATH=/usr/local/bin:/usr/bin"}
	r.store.addImage(t, "no-entry", rootfs.ImageConfig{Env: path, Entrypoint: []string{"/opt/app/run"}, WorkingDir: "/srv"}, "srv/")
	r.store.addImage(t, "no-cmd", rootfs.ImageConfig{Env: path, Cmd: []string{"serve", "--now"}}, "usr/bin/sh")
	r.store.addImage(t, "relative", rootfs.ImageConfig{Env: path, Entrypoint: []string{"bin/run"}, WorkingDir: "/srv"}, "srv/", "bin/run")
	r.store.addImage(t, "no-dir", rootfs.ImageConfig{Env: path, Entrypoint: []string{"/usr/bin/app"}, WorkingDir: "/srv/gone"}, "usr/bin/app", "srv/")
	r.store.addImage(t, "file-dir", rootfs.ImageConfig{Env: path, Entrypoint: []string{"/usr/bin/app"}, WorkingDir: "/usr/bin/app"}, "usr/bin/app")
	r.store.addImage(t, "under-work", rootfs.ImageConfig{Env: path, Entrypoint: []string{"/usr/bin/app"}, WorkingDir: "/work/app"}, "usr/bin/app", "work/app/")
	r.store.addImage(t, "relative-dir", rootfs.ImageConfig{Env: path, Entrypoint: []string{"/usr/bin/app"}, WorkingDir: "app"}, "usr/bin/app", "app/")
	for _, c := range []struct{ image, want string }{
		{"no-entry", `its Entrypoint's program "/opt/app/run" is not an executable file in the image`},
		{"no-cmd", `its Cmd's program "serve" is not an executable file on the image's PATH (/usr/local/bin:/usr/bin)`},
		{"relative", `its Entrypoint's program "bin/run" is not an executable file in the image (resolved in its WorkingDir /srv)`},
		{"no-dir", `its WorkingDir "/srv/gone" is not a directory in the image`},
		{"file-dir", `its WorkingDir "/usr/bin/app" is not a directory in the image`},
		{"under-work", `its WorkingDir "/work/app" is below /work, which every run mounts afresh`},
		{"relative-dir", `its WorkingDir "app" is not an absolute path`},
	} {
		_, err := r.Execute(context.Background(), Request{Request: api.Request{Image: c.image}})
		if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrImage saying %q", c.image, err, c.want)
		}
	}
	if n := len(r.rts.backends["runc"].requests()); n != 0 {
		t.Errorf("%d sandboxes started for images that cannot run", n)
	}
	// The user's own program in place of Cmd is looked up the same way.
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Image: "no-cmd", Args: []string{"sh", "-c", "true"}}}); err != nil {
		t.Errorf("no-cmd with sh as the program: %v", err)
	}
}
