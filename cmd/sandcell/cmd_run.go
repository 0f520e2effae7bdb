package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/executor"
)

// runCommand: sandcell run --lang LANG (--code STRING | FILE) [flags]
//
// With --image NAME the run's root is the imported image's: with --lang,
// the language's program runs with the image's interpreter or compiler;
// without, the image's own Entrypoint and Cmd run (ARGS after "--"
// replace Cmd, as in docker run).
//
// Prints the program's stdout and stderr (or the result object with --json)
// and exits with the program's exit status; 125 when sandcell itself fails.
func runCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	var (
		lang, code, stdinPath string
		image                 string
		isolation             string
		asJSON, standalone    bool
		envs                  multiFlag
		timeout, cpuTime      time.Duration
		memory, tmpfs         int64
		lim                   api.Limits
	)
	fs.StringVar(&lang, "lang", "", "language (see 'sandcell languages')")
	fs.StringVar(&code, "code", "", "program source (instead of FILE)")
	fs.StringVar(&image, "image", "", "run in this imported image (see 'sandcell image list'); without --lang, run its Entrypoint/Cmd")
	fs.StringVar(&stdinPath, "stdin", "", "file to give as standard input, or - for this process's stdin")
	fs.BoolVar(&asJSON, "json", false, "print the result object as JSON")
	fs.BoolVar(&standalone, "standalone", false, "never use a running local server (its control socket): make an instance for this run (also "+noServerEnv+"=1)")
	fs.StringVar(&isolation, "isolation", "", "runc, gvisor or wasm (default: the global --isolation, runc)")
	fs.Var(&envs, "env", "KEY=VALUE added to the program's environment (repeatable)")
	fs.DurationVar(&timeout, "timeout", 0, "wall-clock limit, e.g. 5s (default 10s)")
	fs.DurationVar(&cpuTime, "cpu-time", 0, "CPU-time limit, e.g. 2s (default 10s)")
	config.SizeFlag(fs, &memory, "memory", "memory limit, e.g. 128MiB (default 256MiB)")
	fs.Int64Var(&lim.Pids, "pids", 0, "process/thread limit (default 64)")
	fs.Float64Var(&lim.CPUs, "cpus", 0, "CPU quota in CPUs, e.g. 0.5 (default 1)")
	config.SizeFlag(fs, &lim.OutputBytes, "output-limit", "cap per output stream, e.g. 1MiB (default 1MiB)")
	config.SizeFlag(fs, &tmpfs, "tmpfs", "size of /tmp and /work each (default 64MiB)")
	config.SizeFlag(fs, &lim.FileBytes, "file-size", "largest file the program may write, e.g. 16MiB")
	fs.Int64Var(&lim.OpenFiles, "open-files", 0, "open file descriptors per process")
	return func(ctx context.Context, pos []string) int {
		var source []byte
		var args []string
		var err error
		switch {
		case image != "" && lang == "":
			if code != "" {
				return env.usageError("run", "--code needs --lang (the language of the code)")
			}
			args = pos // the image's own program: ARGS replace its Cmd
		case lang == "":
			return env.usageError("run", "--lang is required (or --image NAME)")
		case code != "" && len(pos) > 0:
			return env.usageError("run", "give either --code or FILE, not both")
		case code != "":
			source = []byte(code)
		case len(pos) == 1:
			if source, err = readCapped(pos[0], nil, executor.MaxSourceBytes); err != nil {
				return env.fail(err)
			}
		default:
			return env.usageError("run", "give the program with --code STRING or as one FILE")
		}
		var stdin []byte
		if stdinPath != "" {
			if stdin, err = readCapped(stdinPath, env.stdin, executor.MaxStdinBytes); err != nil {
				return env.fail(err)
			}
		}
		// Request units: whole milliseconds and MiB, rounded up (a limit
		// is never loosened to zero, "the default", by rounding).
		lim.TimeoutMS, lim.CPUTimeMS = ceilDiv(int64(timeout), int64(time.Millisecond)), ceilDiv(int64(cpuTime), int64(time.Millisecond))
		lim.MemoryMB, lim.TmpfsMB = ceilDiv(memory, 1<<20), ceilDiv(tmpfs, 1<<20)
		req := api.Request{Language: lang, Source: source, Args: args, Stdin: stdin, Env: envs, Limits: lim, Isolation: isolation, Image: image}
		if !standalone && env.serverAllowed() {
			// The run as a server would run it: this process's default
			// isolation, named.
			run := controlRun{Language: lang, Source: source, Args: args, Env: envs, Stdin: stdin, Limits: lim,
				Isolation: cmp.Or(isolation, env.cfg.Isolation), Image: image}
			if reply := runOnServer(ctx, env.log, env.cfg.StateDir, env.cfg.LayerDir, run); reply != nil {
				if reply.Error != "" {
					fmt.Fprintf(env.stderr, "sandcell: %s\n", reply.Error)
					return exitInternal
				}
				reply.Result.Notes = reply.Notes
				return env.printResult(*reply.Result, asJSON)
			}
		}
		e, err := env.cfg.OpenExecutor(env.log, nil)
		if err != nil {
			return env.fail(err)
		}
		defer e.Close()
		res, err := e.Execute(ctx, executor.Request{Request: req})
		if err != nil {
			return env.fail(err)
		}
		return env.printResult(res, asJSON)
	}
}

// printResult prints a run's result as `run` does, whichever ran it: the
// limit notes logged, the result as JSON or the program's streams (and a
// line saying why when it did not end by itself), and returns the exit
// status.
func (env *cliEnv) printResult(res api.Result, asJSON bool) int {
	for _, n := range res.Notes {
		env.log.Warn("limit clamped", "note", n)
	}
	if asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else {
		io.WriteString(env.stdout, res.Stdout)
		io.WriteString(env.stderr, res.Stderr)
		if res.Status != api.StatusOK && res.Status != api.StatusError {
			fmt.Fprintf(env.stderr, "sandcell: %s: %s\n", res.Status, res.Message)
		}
	}
	if res.Status == api.StatusInternalError {
		return exitInternal
	}
	return res.ExitCode
}

// localFlags are the global flags a run on a local server honours: where
// to find it (--state-dir), which home it must have (--home), the default
// isolation (sent with the run) and this process's logs. Any other global
// setting given (limits, ceilings, --no-build...: on the command line or
// in a --config file) is the server's to decide, so such a run goes
// standalone, where it holds.
var localFlags = []string{"state-dir", "home", "layer-dir", "isolation", "log-level", "config"}

// serverAllowed is whether `run` may use a local server: not turned off
// by the environment, and no global setting given that the server would
// not honour.
func (env *cliEnv) serverAllowed() bool {
	if os.Getenv(noServerEnv) == "1" {
		return false
	}
	if env.global == nil {
		return true
	}
	var given []string
	env.global.Visit(func(f *flag.Flag) { given = append(given, f.Name) })
	if env.file != nil {
		given = append(given, env.file.Keys()...) // serve's keys are not the global set's
	}
	for _, name := range given {
		if env.global.Lookup(name) != nil && !slices.Contains(localFlags, name) {
			return false
		}
	}
	return true
}

// ceilDiv is n/d rounded up, for n >= 0 (n < 0 stays negative: refused
// as such).
func ceilDiv(n, d int64) int64 {
	if n <= 0 {
		return n / d
	}
	return (n-1)/d + 1
}
