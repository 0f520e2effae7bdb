package backend_test

import (
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

// TestGVisorFuseClosed: a gVisor run cannot open /dev/fuse (issue #37).
// The device is gVisor's own (its sentry serves FUSE, no host device), and
// mount(2) is denied, so an open one answered only EIO; but it is surface
// that SECURITY.md's device list does not grant, and a runc run has none.
// Both the device's open modes are tried: a FUSE server opens it read-write,
// and a directory put in its place must not open for reading either.
func TestGVisorFuseClosed(t *testing.T) {
	e := newGVisorEnv(t)
	res := e.run(t, "python", `import errno, os
for name, flags in (("rdwr", os.O_RDWR), ("rdonly", os.O_RDONLY)):
    try:
        os.close(os.open("/dev/fuse", flags))
        print(name, "opened")
    except OSError as err:
        print(name, errno.errorcode[err.errno])
`, limits.Set{})
	if res.Status != api.StatusOK {
		t.Fatalf("status %s (exit %d): %s\n%s", res.Status, res.ExitCode, res.Message, res.Stderr)
	}
	if strings.Contains(res.Stdout, "opened") {
		t.Errorf("/dev/fuse opens under gVisor:\n%s", res.Stdout)
	}
	t.Logf("open /dev/fuse:\n%s", res.Stdout)
}
