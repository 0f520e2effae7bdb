package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// exitInternal is the exit status when sandcell itself fails (like docker run).
const exitInternal = 125

// usage is the top-level help.
const usage = `usage: sandcell <command> [flags]

commands:
  run        run one program in a fresh sandbox
  batch      run a JSON-lines file of programs (or HumanEval-X) and judge them
  serve      serve MCP on stdio, Streamable HTTP (--http) and TCP (--tcp)
  rootfs     build, list, prune and verify language layers (rootfs build|list|prune|verify)
  build      same as rootfs build
  doctor     check what this host supports and how to fix what is missing
  bench      latency and throughput of sandboxes against the bare process, bwrap and the runc/runsc CLIs
  languages  list the languages and whether their layers are built
  setup      as root: delegate a cgroup subtree to a user (rootless with every limit)

Run 'sandcell <command> -h' for the command's flags.
`

// command is one subcommand: it parses its own flags and returns an exit
// status.
type command func(ctx context.Context, env *cliEnv, args []string) int

// cliEnv is what every command gets: its streams and the global options.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	log            *slog.Logger
	cfg            Config
}

// run is the whole CLI, testable without a process: it returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmds := map[string]command{
		"run":       cmdRun,
		"batch":     cmdBatch,
		"serve":     cmdServe,
		"build":     cmdBuild,
		"rootfs":    cmdRootfs,
		"doctor":    cmdDoctor,
		"bench":     cmdBench,
		"languages": cmdLanguages,
		"setup":     cmdSetup,
	}
	global := flag.NewFlagSet("sandcell", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.Usage = func() { fmt.Fprint(stderr, usage) }
	cfg := DefaultConfig()
	if uid, _, ok := rootlessIDs(); ok {
		rootlessDefaults(&cfg, uid)
	}
	cfg.addFlags(global)
	logLevel := global.String("log-level", "warn", "log level on stderr: debug, info, warn, error")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "sandcell: bad --log-level %q\n", *logLevel)
		return 2
	}
	cmd, ok := cmds[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "sandcell: unknown command %q\n\n%s", rest[0], usage)
		return 2
	}
	env := &cliEnv{
		stdin: stdin, stdout: stdout, stderr: stderr, cfg: cfg,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	return cmd(ctx, env, rest[1:])
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("run FILE --json" and "run --json FILE" both work).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// multiFlag collects a repeatable string flag (--env K=V --env K2=V2).
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// fail prints a one-line reason and returns the internal-failure status.
func (e *cliEnv) fail(err error) int {
	fmt.Fprintf(e.stderr, "sandcell: %v\n", err)
	return exitInternal
}
