package backend

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend/zygote"
)

// TestInitExecutable runs the init that libcontainer runs start
// (underInit, zygote.InitELF) on the host, as a plain child: it starts the
// program found in PATH, keeps its own fds from it, and hands over the
// program's real wait status (SIGABRT, not the 134 it exits with itself);
// a program found nowhere exits 127.
func TestInitExecutable(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   []string
		status func(syscall.WaitStatus) bool
		stdout string
	}{
		{"abort", []string{"sh", "-c", "[ -e /proc/$$/fd/3 ] || [ -e /proc/$$/fd/4 ] && echo leaked; kill -ABRT $$"},
			func(ws syscall.WaitStatus) bool { return ws.Signaled() && ws.Signal() == syscall.SIGABRT }, ""},
		{"exit", []string{"sh", "-c", "echo hi; exit 7"},
			func(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 7 }, "hi\n"},
		{"missing", []string{"no-such-program-anywhere"},
			func(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 127 }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &libcontainer.Process{Args: c.args}
			status, started, err := underInit(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer status.Close()
			if p.Args[1] != zygote.InitArg || len(p.ExtraFiles) != 2 {
				t.Fatalf("argv %q, %d extra files", p.Args, len(p.ExtraFiles))
			}
			cmd := exec.Command(p.Args[0], p.Args[1:]...)
			cmd.ExtraFiles = p.ExtraFiles
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			out, err := cmd.Output()
			started()
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			got := programStatus(ws, status)
			if !c.status(got) || string(out) != c.stdout {
				t.Errorf("init's status %v (%v), program's %#x, stdout %q", ws, err, uint32(got), out)
			}
		})
	}
}

// TestInitExecutableFromFile runs the init as a gVisor run starts it
// (underGVisorInit, writeGVisorInit): from a file in /work, its status in
// another, on the host as a plain child. The init unlinks both before the
// program starts (the program sees neither) and writes the program's real
// wait status to the file sandcell holds open.
func TestInitExecutableFromFile(t *testing.T) {
	work := t.TempDir()
	spec := &specs.Spec{Linux: &specs.Linux{}, Process: &specs.Process{Args: []string{"sh", "-c", "ls -A " + work + "; kill -ABRT $$"}}}
	names, err := underGVisorInit(spec)
	if err != nil {
		t.Fatal(err)
	}
	// writeGVisorInit's files, without its remount of /work's tmpfs.
	code, err := initCode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, names[0]), code, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, names[1]), make([]byte, 5), 0o600); err != nil {
		t.Fatal(err)
	}
	status, err := os.Open(filepath.Join(work, names[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer status.Close()
	args := slices.Clone(spec.Process.Args)
	for i := range args[:3] {
		args[i] = strings.Replace(args[i], oci.WorkDir, work, 1)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	got := programStatus(ws, status)
	if !got.Signaled() || got.Signal() != syscall.SIGABRT || len(out) != 0 {
		t.Errorf("init's status %v (%v), program's %#x, the program saw %q in /work, want SIGABRT and nothing", ws, err, uint32(got), out)
	}
}
