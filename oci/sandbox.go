package oci

import (
	"context"
	"io"
	"net"
	"os"

	"github.com/sandcell/sandcell/api"
)

// A live sandbox (issue #39) is the third runtime shape beside a run and a
// kernel: one sandbox that lives between calls, in which many processes
// start, run in the background and end. Its lock-down is a run's (the same
// spec: namespaces, seccomp, no capabilities, read-only layers, cgroup
// limits for the whole sandbox, no network unless a policy allows it); what
// differs is a writable root (an upper layer over the read-only layers,
// bounded by the disk quota), a default non-root user with a home, no
// wall clock of its own, and processes started into it on demand.
//
// The sandbox's PID 1 is sandcell's init in agent mode: it starts the
// processes sandcell asks for (argv, env, cwd, user, standard streams or a
// terminal handed over on a channel only sandcell holds), reports each one's
// wait status, reaps orphans. What it tells sandcell is untrusted input.

// LiveRuntime starts live sandboxes (oci/backend's libcontainer backend).
type LiveRuntime interface {
	// StartSandbox validates req (Args may be empty: the init is the
	// program; Limits.Wall is not used), creates the sandbox and starts
	// its init. req.Workspace fills /work at start when set.
	StartSandbox(ctx context.Context, req *Request, opts SandboxOptions) (Sandbox, error)
}

// SandboxOptions are what a live sandbox has beyond a run's request.
type SandboxOptions struct {
	// ID is the sandbox's id (also its container's and cgroup's name);
	// "" makes one.
	ID string
	// UpperDir is the host directory that holds the writable root's
	// upper layer and /work across the sandbox's life (it survives a
	// restart of the server: a sandbox re-created on the same UpperDir
	// sees its files). DiskBytes bounds what the sandbox writes there
	// (blocks and inodes as the host pays them).
	UpperDir  string
	DiskBytes int64
	// User and Home name the default non-root user (uid and gid 1000)
	// and its home directory, made in the upper layer if missing.
	User string
	Home string
}

// Sandbox is a running live sandbox. Its methods are safe for concurrent
// use.
type Sandbox interface {
	ID() string
	// Exec starts a process in the sandbox and returns once it runs.
	Exec(ctx context.Context, p ProcSpec) (Proc, error)
	// Pause freezes every process of the sandbox (the cgroup freezer);
	// it keeps its memory and uses no CPU. Resume thaws it.
	Pause() error
	Resume() error
	// Dial connects to a TCP port inside the sandbox's network
	// namespace (its loopback); the sandbox itself cannot reach the
	// host by it.
	Dial(ctx context.Context, port int) (net.Conn, error)
	// Root is a directory handle of the sandbox's root as its
	// processes see it (O_PATH), for file operations that resolve
	// every path inside it (openat2 RESOLVE_IN_ROOT). The caller closes
	// it.
	Root() (*os.File, error)
	// Usage is what the sandbox uses now: memory and disk bytes.
	Usage() (SandboxUsage, error)
	// Exited is closed when the sandbox's init ended (killed, out of
	// memory); DeathReason then says why.
	Exited() <-chan struct{}
	DeathReason() string
	// Destroy kills every process and removes every trace of the
	// sandbox on the host except UpperDir (the caller removes it when
	// the sandbox is gone for good). Safe to call more than once.
	Destroy() error
}

// SandboxUsage is a sandbox's use of memory and disk now.
type SandboxUsage struct {
	MemoryBytes int64
	DiskBytes   int64
}

// ProcSpec is one process to start in a live sandbox.
type ProcSpec struct {
	Args []string
	Env  []string // KEY=VALUE, complete (the caller merged the sandbox's)
	Cwd  string   // absolute inside the sandbox
	// UID and GID inside the sandbox (0 is the sandbox's root, which has
	// no capability on the host).
	UID, GID uint32
	// Stdin: the process reads from a pipe the caller writes through
	// Proc.Stdin; false: /dev/null.
	Stdin bool
	// PTY runs it as the session leader of a new terminal of that size;
	// its stdout and stderr are the terminal (stream "pty").
	PTY *api.PTYSize
	// OnOutput receives the output as it comes, in order per stream
	// (stream is api.StreamStdout, StreamStderr or StreamPTY); it must
	// not block for long (the reader waits for it). Nil drops output.
	OnOutput func(stream string, data []byte)
}

// Proc is a process started by Sandbox.Exec.
type Proc interface {
	// PID is the process id inside the sandbox.
	PID() int
	// Stdin is the write end of its standard input (nil unless
	// ProcSpec.Stdin or PTY); Close closes its stdin.
	Stdin() io.WriteCloser
	Resize(size api.PTYSize) error
	// Signal sends sig to the process (to its process group when it
	// leads one).
	Signal(sig int) error
	// Wait blocks until the process ended and all its output was handed
	// to OnOutput, or ctx ended (then the error is ctx's).
	Wait(ctx context.Context) (api.ProcessExit, error)
}
