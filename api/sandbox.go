package api

import (
	"context"
	"errors"
	"net"
	"time"
)

// Live sandboxes (issue #39): a sandbox that lives between calls, with
// processes that run in the background, ports, a terminal, pause and
// resume. These are the wire types every front end shares (MCP tools, the
// HTTP API, the E2B drop-in) and Sandboxes, what those front ends ask of
// the service; service.Service implements it.

// ErrNotFound: the sandbox, process or file named does not exist (or
// no longer does). MCP: an isError result; REST: HTTP 404.
var ErrNotFound = errors.New("not found")

// NotFound is an error in class ErrNotFound with msg as its message.
func NotFound(msg string) error { return &class{msg: msg, parent: ErrNotFound} }

// Sandbox states.
const (
	SandboxRunning = "running"
	SandboxPaused  = "paused"
)

// What happens when a sandbox's lifetime ends.
const (
	OnExpireKill  = "kill"  // the default: nothing of it remains
	OnExpirePause = "pause" // frozen, its lifetime clock stopped; resumed by any call
)

// SandboxSpec asks for a live sandbox.
type SandboxSpec struct {
	// Template names what the sandbox starts from: a catalogue language
	// (or alias), an imported image's name, or "" for the server's
	// default (a shell root). Language and Image, when set, must agree
	// with it; at most one of the three is needed.
	Template string `json:"template,omitempty"`
	Language string `json:"language,omitempty"`
	Image    string `json:"image,omitempty"`
	// Limits hold for the whole sandbox (memory, CPUs, pids, open files,
	// file size); TimeoutMS and CPUTimeMS are not used (see LifetimeMS
	// and a process's own TimeoutMS), TmpfsMB sizes /tmp.
	Limits Limits `json:"limits,omitempty"`
	// DiskMB bounds what the sandbox may write: its writable root (the
	// upper layer over the read-only layers) and /work together, counted
	// as the host pays it (blocks and inodes). 0: the server's default.
	DiskMB int64 `json:"disk_mb,omitempty"`
	// LifetimeMS is how long the sandbox lives from now (0: the server's
	// default); a paused sandbox's clock stops. OnExpire says what
	// happens at its end: OnExpireKill (default) or OnExpirePause.
	LifetimeMS int64  `json:"lifetime_ms,omitempty"`
	OnExpire   string `json:"on_expire,omitempty"`
	// Env is the environment every process starts with (a process's own
	// Env wins over it).
	Env map[string]string `json:"env,omitempty"`
	// Metadata is the caller's, kept and returned as given (bounded).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Session, when set, is an existing session whose /work the sandbox
	// mounts (the session's files are the sandbox's /work; run_cell and
	// the file tools see them).
	Session string `json:"session_id,omitempty"`
	// Network is the sandbox's network policy, as a run's (nil: none).
	// Its budgets hold for the sandbox's whole life.
	Network *Network `json:"network,omitempty"`
}

// SandboxInfo is a sandbox as it is now.
type SandboxInfo struct {
	ID       string            `json:"sandbox_id"`
	Template string            `json:"template"`
	Language string            `json:"language,omitempty"`
	Image    string            `json:"image,omitempty"`
	State    string            `json:"state"` // SandboxRunning or SandboxPaused
	Session  string            `json:"session_id,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// StartedAt is when it was created; EndAt when its lifetime ends if
	// it keeps running (a paused sandbox's moves on while it is paused).
	StartedAt time.Time `json:"started_at"`
	EndAt     time.Time `json:"end_at"`
	OnExpire  string    `json:"on_expire"`
	// Limits are the limits in force (after the server's ceilings),
	// DiskMB the disk quota; Notes say what was clamped.
	Limits LimitsInfo `json:"limits"`
	DiskMB int64      `json:"disk_mb"`
	Notes  []string   `json:"notes,omitempty"`
	// User and Home are the default user's name and home directory.
	User string `json:"user"`
	Home string `json:"home"`
	// Processes is how many of its processes run.
	Processes int `json:"processes"`
	// Network, for a sandbox with a network policy, is what it did
	// through it so far: its first connections made and refused (with
	// the reason) and the totals charged to it.
	Network *NetworkLog `json:"network,omitempty"`
}

// LimitsInfo are limits in force, in the units of Limits.
type LimitsInfo = Limits

// PTYSize is a terminal's size in characters.
type PTYSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// ProcessSpec starts a process in a live sandbox.
type ProcessSpec struct {
	// Argv is the program and its arguments; Shell a command line run
	// by the sandbox's shell (bash -l -c where the root has bash, else
	// sh -c). Exactly one of them.
	Argv  []string `json:"argv,omitempty"`
	Shell string   `json:"shell,omitempty"`
	// Cwd is the working directory (default: the user's home); Env adds
	// to the sandbox's environment; User is "" (the default non-root
	// user) or "root" (uid 0 of the sandbox: no capability on the host).
	Cwd  string            `json:"cwd,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	User string            `json:"user,omitempty"`
	// Stdin keeps the process's standard input open for SendInput
	// (false: it reads end of file at once). Data is written to it
	// first.
	Stdin bool   `json:"stdin,omitempty"`
	Data  []byte `json:"stdin_data,omitempty"`
	// PTY, when set, runs the process on a terminal of that size:
	// stdout and stderr are one stream, "pty".
	PTY *PTYSize `json:"pty,omitempty"`
	// TimeoutMS ends the process (SIGKILL) that long after it started;
	// 0: it runs as long as the sandbox.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Tag is the caller's name for the process (E2B's tag), unique among
	// the sandbox's running processes when set.
	Tag string `json:"tag,omitempty"`
}

// ProcessInfo is a process of a live sandbox.
type ProcessInfo struct {
	// PID is its process id inside the sandbox.
	PID  int         `json:"pid"`
	Tag  string      `json:"tag,omitempty"`
	Spec ProcessSpec `json:"spec"`
	// Exit is nil while it runs.
	Exit      *ProcessExit `json:"exit,omitempty"`
	StartedAt time.Time    `json:"started_at"`
}

// ProcessExit is how a process ended.
type ProcessExit struct {
	// ExitCode is the exit status, or 128+n for a signal n (as a shell).
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended it ("SIGKILL"), "" if it exited.
	Signal string `json:"signal,omitempty"`
	// Reason says why sandcell ended it, when it did: "timeout",
	// "sandbox killed", "out of memory"; "" otherwise.
	Reason string `json:"reason,omitempty"`
	// Error is a message for the caller when it did not end normally.
	Error string `json:"error,omitempty"`
}

// Process output streams.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamPTY    = "pty"
)

// ProcessEvent is one event of a process's life, in order: Start once,
// Data any number of times, End once (the last event); Keepalive events may
// come between when nothing happened for a while.
type ProcessEvent struct {
	Start *ProcessInfo `json:"start,omitempty"`
	// Data is output of Stream ("stdout", "stderr" or "pty").
	Stream string `json:"stream,omitempty"`
	Data   []byte `json:"data,omitempty"`
	// Dropped counts bytes of this stream lost before Data because a
	// reader fell behind the ring (a replay from an older offset).
	Dropped   int64        `json:"dropped,omitempty"`
	End       *ProcessExit `json:"end,omitempty"`
	Keepalive bool         `json:"keepalive,omitempty"`
}

// FileInfo is an entry of a sandbox's filesystem.
type FileInfo struct {
	Name string `json:"name"`
	// Path is absolute, inside the sandbox.
	Path string `json:"path"`
	// Type is "file", "dir" or "symlink" (then Target is its target;
	// nothing follows it).
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits
	Owner   string    `json:"owner,omitempty"`
	Group   string    `json:"group,omitempty"`
	ModTime time.Time `json:"mod_time"`
	Target  string    `json:"symlink_target,omitempty"`
}

// Sandboxes is what front ends ask of live sandboxes. Every call that
// names a sandbox resumes it first if it is paused (a paused sandbox's
// lifetime clock starts again). Errors: api.ErrInvalid (a bad request),
// ErrNotFound (no such sandbox, process or file), api.ErrBusy (the
// server's limits); any other error is sandcell's failure, with a message
// that says what failed.
type Sandboxes interface {
	CreateSandbox(ctx context.Context, spec SandboxSpec) (SandboxInfo, error)
	Sandboxes(ctx context.Context) ([]SandboxInfo, error)
	Sandbox(ctx context.Context, id string) (SandboxInfo, error)
	// KillSandbox ends every process of it and removes all of it.
	KillSandbox(ctx context.Context, id string) error
	// SetSandboxLifetime sets its end to d from now.
	SetSandboxLifetime(ctx context.Context, id string, d time.Duration) (SandboxInfo, error)
	PauseSandbox(ctx context.Context, id string) (SandboxInfo, error)
	ResumeSandbox(ctx context.Context, id string) (SandboxInfo, error)

	// StartProcess starts a process and returns once it runs (or failed
	// to start: an error, e.g. ErrInvalid "no such file" for a missing
	// program).
	StartProcess(ctx context.Context, id string, spec ProcessSpec) (ProcessInfo, error)
	// Processes lists its running processes (and those that ended within
	// the last minute, with Exit set).
	Processes(ctx context.Context, id string) ([]ProcessInfo, error)
	// FindProcess finds a process by pid (pid > 0) or else by tag.
	FindProcess(ctx context.Context, id string, pid int, tag string) (ProcessInfo, error)
	// Events streams a process's events: what its output ring still
	// holds from the start, then live, until End or ctx ends. The
	// channel is closed after the last event.
	Events(ctx context.Context, id string, pid int) (<-chan ProcessEvent, error)
	// Wait waits for the process to end.
	Wait(ctx context.Context, id string, pid int) (ProcessExit, error)
	SendInput(ctx context.Context, id string, pid int, data []byte) error
	CloseStdin(ctx context.Context, id string, pid int) error
	// Signal sends sig (a number, e.g. 9 or 15) to the process.
	Signal(ctx context.Context, id string, pid int, sig int) error
	Resize(ctx context.Context, id string, pid int, size PTYSize) error

	// Files: paths are absolute inside the sandbox (or relative to the
	// default user's home); nothing follows a link out of the sandbox's
	// root; sizes are bounded by the sandbox's disk quota.
	Stat(ctx context.Context, id, path string) (FileInfo, error)
	ListDir(ctx context.Context, id, path string, depth int) ([]FileInfo, error)
	MakeDir(ctx context.Context, id, path string) (created bool, err error)
	Move(ctx context.Context, id, from, to string) (FileInfo, error)
	Remove(ctx context.Context, id, path string) error
	ReadFile(ctx context.Context, id, path string, max int64) ([]byte, error)
	// WriteFile writes a file, making its parent directories, owned by
	// user ("" the default user, or "root").
	WriteFile(ctx context.Context, id, path string, data []byte, user string) (FileInfo, error)

	// DialPort connects to a TCP port a process of the sandbox listens on
	// (on the sandbox's loopback or any address); the connection is the
	// host-side proxy's and is charged to the sandbox.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}
