package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// maxStdinBytes caps the input a run may be given.
const maxStdinBytes = 16 << 20

// cmdRun: sandcell run --lang LANG (--code STRING | FILE) [flags]
//
// Prints the program's stdout and stderr (or the result object with --json)
// and exits with the program's exit status; 125 when sandcell itself fails.
func cmdRun(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	var (
		lang, code, stdinPath string
		isolation             string
		asJSON                bool
		envs                  multiFlag
		req                   limits.Set
	)
	fs.StringVar(&lang, "lang", "", "language (see 'sandcell languages')")
	fs.StringVar(&code, "code", "", "program source (instead of FILE)")
	fs.StringVar(&stdinPath, "stdin", "", "file to give as standard input, or - for this process's stdin")
	fs.BoolVar(&asJSON, "json", false, "print the result object as JSON")
	fs.StringVar(&isolation, "isolation", "", "runc or gvisor (default: the global --isolation, runc)")
	fs.Var(&envs, "env", "KEY=VALUE added to the program's environment (repeatable)")
	fs.DurationVar(&req.Timeout, "timeout", 0, "wall-clock limit, e.g. 5s (default 10s)")
	fs.DurationVar(&req.CPUTime, "cpu-time", 0, "CPU-time limit, e.g. 2s (default 10s)")
	sizeFlag(fs, &req.MemoryBytes, "memory", "memory limit, e.g. 128MiB (default 256MiB)")
	fs.Int64Var(&req.Pids, "pids", 0, "process/thread limit (default 64)")
	fs.Float64Var(&req.CPUs, "cpus", 0, "CPU quota in CPUs, e.g. 0.5 (default 1)")
	sizeFlag(fs, &req.OutputBytes, "output-limit", "cap per output stream, e.g. 1MiB (default 1MiB)")
	sizeFlag(fs, &req.TmpfsBytes, "tmpfs", "size of /tmp and /work each (default 64MiB)")
	sizeFlag(fs, &req.FileBytes, "file-size", "largest file the program may write, e.g. 16MiB")
	fs.Uint64Var(&req.OpenFiles, "open-files", 0, "open file descriptors per process")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if lang == "" {
		fmt.Fprintln(env.stderr, "sandcell run: --lang is required")
		return 2
	}
	var source []byte
	switch {
	case code != "" && len(pos) > 0:
		fmt.Fprintln(env.stderr, "sandcell run: give either --code or FILE, not both")
		return 2
	case code != "":
		source = []byte(code)
	case len(pos) == 1:
		if source, err = readCapped(pos[0], nil, maxSourceBytes); err != nil {
			return env.fail(err)
		}
	default:
		fmt.Fprintln(env.stderr, "sandcell run: give the program with --code STRING or as one FILE")
		return 2
	}
	var stdin []byte
	if stdinPath != "" {
		if stdin, err = readCapped(stdinPath, env.stdin, maxStdinBytes); err != nil {
			return env.fail(err)
		}
	}

	a, err := openApp(env.cfg, env.log)
	if err != nil {
		return env.fail(err)
	}
	defer a.Close()
	res, notes, err := a.execute(ctx, execRequest{Language: lang, Source: source, Stdin: stdin, Env: envs, Limits: req, Isolation: isolation})
	for _, n := range notes {
		env.log.Warn("limit clamped", "note", n)
	}
	if err != nil && res.Status == "" {
		return env.fail(err)
	}
	if asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else {
		io.WriteString(env.stdout, res.Stdout)
		io.WriteString(env.stderr, res.Stderr)
		if res.Status != oci.StatusOK && res.Status != oci.StatusError {
			fmt.Fprintf(env.stderr, "sandcell: %s: %s\n", res.Status, res.Message)
		}
	}
	if res.Status == oci.StatusInternalError {
		return exitInternal
	}
	return res.ExitCode
}

// sizeFlag registers a flag that takes a size with a unit (128MiB, 1GiB).
func sizeFlag(fs *flag.FlagSet, dst *int64, name, help string) {
	fs.Func(name, help, func(v string) error {
		n, err := limits.ParseSize(v)
		*dst = n
		return err
	})
}

// readCapped reads a file (or stdin for "-") of at most max bytes.
func readCapped(path string, stdin io.Reader, max int64) ([]byte, error) {
	var r io.Reader
	if path == "-" && stdin != nil {
		r = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %s", path, limits.FormatSize(max))
	}
	return b, nil
}
