package api

import "io"

// Request is one program to run, as a caller asks for it: the language's
// program made of Source (execute_code, `sandcell run`, a batch line), a
// Command (run_command) or a Script of the session's /work (run_script).
// The MCP tools, the CLI, batch and the REST adapters build it; service
// adds the session and executor runs it.
type Request struct {
	// Language names the program's language (a name or an alias of the
	// catalogue). For a Command it only chooses the root filesystem ("":
	// the session's language, else sh); for a Script "" means "from the
	// file's extension".
	Language string
	Source   []byte
	// Command, if set, is the argv run instead of the language's program,
	// in the language's root; there is no compile phase.
	Command []string
	// Script, if set, is the path (relative to /work) of a file of the
	// session run as the language's program in place of its source file.
	Script string
	// Args are appended to the program's argv.
	Args []string
	// CompilerOptions are added to the compile phase's argv, before the
	// argument naming the source file (after the catalogue's own flags,
	// so that a later -O or -std wins), for a language with a compile
	// phase; ignored for one without (Judge0's compiler_options).
	CompilerOptions []string
	// Files are written into /work before the run (over the session's).
	Files []File
	// Env holds KEY=VALUE pairs added to the program's environment.
	Env   []string
	Stdin []byte // nil: no input (/dev/null)
	// StdinStream, if set, is the run phase's standard input instead of
	// Stdin, read while the program runs (an interactive client). The
	// caller must make its Read return once Execute returned.
	StdinStream io.Reader
	// Limits may tighten or loosen the server's defaults within its
	// ceilings; zero fields mean "the default".
	Limits Limits
	// CompileLimits, if set, are the compile phase's limits in place of
	// Limits (the REST APIs give each phase its own: Piston's
	// compile_timeout, Judge0's fixed compile limits).
	CompileLimits *Limits
	// Isolation is "runc", "gvisor", "wasm", or "" for the server's default.
	Isolation string
	// Image, if set, names an imported image (sandcell image import)
	// whose root filesystem the run gets instead of the language's: the
	// language's program (or Command) runs with the image's interpreter,
	// compiler and environment. With neither a Language, Script nor
	// Command, the image's own Entrypoint and Cmd run. The lock-down is
	// the same as in a language's root.
	Image string
	// SessionID, if set, runs with the session's persistent /work.
	SessionID string
	// Dependencies are packages the run needs: their dependency layer is
	// mounted read-only, installed first if no run asked for the same set
	// before.
	Dependencies []string
	// Network is the run phase's network policy (nil: none; see
	// Network). The compile phase and dependency installs never get it.
	Network *Network
	// Output, if set, receives the program's output while it runs. stream
	// is "stdout" or "stderr", prefixed with "compile " in a compile
	// phase, or "setup" for what happens before (a layer build of a first
	// use). It is called from the capture goroutines and must not block.
	Output func(stream, text string)
	// PhaseDone, if set, is called when a phase ended ("compile" or
	// "run"), with its result, before the next phase starts (the Piston
	// WebSocket's exit events). It is not called for a refused request.
	PhaseDone func(phase string, p Phase)
}

// Limits are a run's limits in request units: milliseconds, MiB, counts
// and bytes, as the MCP tools, batch lines, the REST adapters and the
// language catalogue (its per-language adjustments) give them. Zero in a
// field means "not given". package limits turns them into a limits.Set
// (FromRequest), resolves them against the server's defaults and ceilings
// and converts them to the spec's cgroup values and rlimits.
type Limits struct {
	TimeoutMS   int64   `json:"timeout_ms,omitempty"`   // wall-clock limit
	CPUTimeMS   int64   `json:"cpu_time_ms,omitempty"`  // CPU-time limit (RLIMIT_CPU and a watchdog)
	MemoryMB    int64   `json:"memory_mb,omitempty"`    // cgroup memory limit, MiB
	Pids        int64   `json:"pids,omitempty"`         // processes and threads
	CPUs        float64 `json:"cpus,omitempty"`         // CPU quota in CPUs (0.5: half a core)
	OutputBytes int64   `json:"output_bytes,omitempty"` // cap of each output stream
	TmpfsMB     int64   `json:"tmpfs_mb,omitempty"`     // size of each writable tmpfs (/tmp, /work, /dev/shm), MiB
	FileBytes   int64   `json:"file_bytes,omitempty"`   // RLIMIT_FSIZE, the largest file the run may write
	OpenFiles   int64   `json:"open_files,omitempty"`   // RLIMIT_NOFILE
}

// IsZero reports whether l gives no limit.
func (l Limits) IsZero() bool { return l == Limits{} }
