package backend

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/opencontainers/runc/libcontainer"

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
