package oci

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

// Request is what to run: one program in one fresh container.
type Request struct {
	// Root is the absolute host path of the read-only root filesystem
	// (a language layer from package rootfs).
	Root string
	// Args is the program's argv; Args[0] is resolved inside the container.
	Args []string
	// Env holds KEY=VALUE pairs added to the base environment (PATH, HOME,
	// LANG, TERM=dumb). Nothing of the server's own environment is passed.
	Env []string
	// Cwd is the working directory inside the container; default /work.
	Cwd string
	// Stdin is the program's standard input. Nil means /dev/null.
	Stdin []byte
	// StdinStream, if set, is the program's standard input instead of
	// Stdin, copied into it while it runs (an interactive client: the
	// Piston WebSocket). The caller must make its Read return (EOF or an
	// error) once Wait returned: the copy ends only then. Such a run is
	// never served by a warm pool.
	StdinStream io.Reader
	// Files are written into /work before the program starts.
	Files []api.File
	// Limits are the run's resolved limits (see limits.Resolve).
	Limits limits.Set
	// Collect, if set, receives the files left in /work after the program
	// ended with status ok (a compile phase's outputs, handed to the run
	// phase), from Wait, before the result is returned.
	Collect func([]api.File)
	// Workspace, if set, is a session's persistent /work: its files are
	// copied into the run's fresh /work tmpfs before the request's Files
	// are written (a File replaces an entry of the same path), and /work
	// is handed back to it by Wait after the program died (whatever the
	// verdict; after Collect), before the tmpfs is unmounted. Nil: /work
	// starts empty and is thrown away.
	// WorkBytes is the size of /work (0: Limits.TmpfsBytes, like /tmp):
	// a session's quota. Like every tmpfs, what is in it counts against
	// the run's memory limit: what the program writes, and what the fill
	// helper wrote there before it started (see fill_linux.go).
	WorkBytes int64
	Workspace Workspace
	// OnOutput, if set, receives the program's output while it runs, in
	// order per stream, cleaned like the result's text (see TextCleaner)
	// and only up to the output cap. stream is "stdout" or "stderr". It is
	// called from the capture goroutines (one per stream, concurrently)
	// and must return quickly; it is never called after Wait returned.
	// For output under the cap, the texts of a stream joined are the
	// result's text of that stream.
	OnOutput func(stream, text string)
	// Egress, if set, puts the run in network mode egress: the absolute
	// path of a unix socket where an allowlisting proxy (package
	// internal/egress) listens. The run then reaches it at EgressAddr,
	// and only it (see network.go). Empty: network mode none. Only the
	// libcontainer backend offers it.
	Egress string
	// Network, if set, gives the run a network under policy (issue #40):
	// the backend makes a tun in the run's network namespace, its only
	// route, and attaches the gateway to it (see network.go). The caller
	// made the gateway and closes it once Run returned. Only the
	// libcontainer backend offers it; never with Egress.
	Network NetworkGateway
	// Mounts are extra bind mounts in /tmp (dependency layers).
	Mounts []Mount
}

// Workspace is a session's persistent files (implemented by
// internal/workspace through package service). sandcell fills /work when
// the run is prepared, with the fill helper in the run's cgroup if the
// workspace is a TreeWorkspace and the binary has the helper (InitFill),
// else with Fill; and calls Save at most once, from Wait, when no process of the
// run is left; neither is called for a run that failed before its program
// started, and Save is not called when the program may still be alive (a
// container that would not die): the workspace then keeps its files.
type Workspace interface {
	// Fill copies the workspace into dir, the run's empty /work, owned by
	// the sandbox user. What it creates should have dir's owner (the
	// sandbox user's host uid and gid), so that the program can change it.
	// No program has run in dir yet.
	Fill(dir string) error
	// Save takes dir, the run's /work after the program died, as the
	// workspace's new content. dir is untrusted: the program wrote it and
	// may have planted symlinks (to host paths), fifos, huge sparse files
	// or deep trees; read it through an os.Root without following links,
	// as collect does (CVE-2024-28185: Judge0 followed a symlink its
	// sandbox planted).
	Save(dir string) error
}

// File is a file placed in the run's /work directory.
type File struct {
	Path string      // relative to /work; no "..", not absolute
	Data []byte      // content
	Mode fs.FileMode // permission bits; 0 means 0644
}

// Size caps on a request, so that a hostile or broken caller gets a clear
// error instead of an E2BIG from execve deep inside runc init.
const (
	maxArgs     = 4096
	maxEnv      = 512
	maxArgBytes = 1 << 20 // argv + env together (the kernel allows 2 MiB at 8 MiB stack)
)

// Validate checks a request before any host resource is touched. Errors wrap
// ErrInvalidRequest and name the field.
func (r *Request) Validate() error {
	if !filepath.IsAbs(r.Root) {
		return fmt.Errorf("%w: root %q is not an absolute path", ErrInvalidRequest, r.Root)
	}
	if len(r.Args) == 0 || r.Args[0] == "" {
		return fmt.Errorf("%w: no program to run (args is empty)", ErrInvalidRequest)
	}
	if len(r.Args) > maxArgs {
		return fmt.Errorf("%w: %d args, at most %d", ErrInvalidRequest, len(r.Args), maxArgs)
	}
	if len(r.Env) > maxEnv {
		return fmt.Errorf("%w: %d environment variables, at most %d", ErrInvalidRequest, len(r.Env), maxEnv)
	}
	total := 0
	for _, a := range r.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: an argument contains a NUL byte", ErrInvalidRequest)
		}
		total += len(a) + 1
	}
	for _, kv := range r.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("%w: environment entry %q is not KEY=VALUE", ErrInvalidRequest, Truncate(kv, 40))
		}
		total += len(kv) + 1
	}
	if total > maxArgBytes {
		return fmt.Errorf("%w: args and environment take %d bytes, at most %d", ErrInvalidRequest, total, maxArgBytes)
	}
	if r.Cwd != "" && !path.IsAbs(r.Cwd) {
		return fmt.Errorf("%w: working directory %q is not absolute", ErrInvalidRequest, r.Cwd)
	}
	var size int64
	seen := make(map[string]bool, len(r.Files))
	for _, f := range r.Files {
		if err := CheckRelPath(f.Path); err != nil {
			return err
		}
		// A File replaces an entry of /work (see Workspace): twice the
		// same path would silently keep the last.
		if seen[f.Path] {
			return fmt.Errorf("%w: file %q is given twice", ErrInvalidRequest, Truncate(f.Path, 80))
		}
		seen[f.Path] = true
		size += int64(len(f.Data))
	}
	if r.WorkBytes < 0 {
		return fmt.Errorf("%w: /work size %d is negative", ErrInvalidRequest, r.WorkBytes)
	}
	if work := r.WorkSize(); work > 0 && size > work {
		return fmt.Errorf("%w: files take %d bytes, more than the %d-byte /work space", ErrInvalidRequest, size, work)
	}
	if err := r.CheckNetwork(); err != nil {
		return err
	}
	return r.Limits.Validate()
}

// CheckRelPath accepts only clean relative paths that stay inside /work.
// Writing is done through os.Root as well; this gives the caller a clear
// error instead of a refused write.
func CheckRelPath(unsafePath string) error {
	if unsafePath == "" || path.IsAbs(unsafePath) || strings.IndexByte(unsafePath, 0) >= 0 ||
		path.Clean(unsafePath) != unsafePath || unsafePath == ".." || strings.HasPrefix(unsafePath, "../") {
		return fmt.Errorf("%w: file path %q must be a clean relative path inside /work", ErrInvalidRequest, Truncate(unsafePath, 80))
	}
	return nil
}

// Truncate cuts s to n bytes, marking the cut with "...", for messages that
// quote what a program or a tool wrote.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// WorkSize is the size of the run's /work tmpfs: WorkBytes, else the
// limits' tmpfs size.
func (r *Request) WorkSize() int64 {
	if r.WorkBytes > 0 {
		return r.WorkBytes
	}
	return r.Limits.TmpfsBytes
}
