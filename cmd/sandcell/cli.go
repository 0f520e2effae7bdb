package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/sandcell/sandcell/internal/config"
	"github.com/sandcell/sandcell/limits"
)

// exitInternal is the exit status when sandcell itself fails (like docker run).
const exitInternal = 125

// command is one subcommand. Its flags are registered by setup, which
// returns the code to run once they are parsed: every command shares one
// prologue (parse, -h, usage errors) and its help is generated from this
// table and its flags.
type command struct {
	name     string
	synopsis string // the arguments after the name
	summary  string // one line, for the top-level help
	// interspersed: flags may come after positional arguments ("run FILE --json").
	interspersed bool
	setup        func(fs *flag.FlagSet, env *cliEnv) func(ctx context.Context, args []string) int
}

// commands are sandcell's subcommands, in the order of the help.
var commands = []command{
	{name: "run", synopsis: "(--lang LANG (--code STRING | FILE) | --image NAME [-- ARGS]) [flags]", summary: "run one program in a fresh sandbox", interspersed: true, setup: runCommand},
	{name: "batch", synopsis: "(--in FILE.jsonl[.gz] | --humaneval PATH) --out RESULTS.jsonl [flags]", summary: "run a JSON-lines file of programs (or HumanEval-X) and judge them", setup: batchCommand},
	{name: "serve", synopsis: "[--stdio] [--http ADDR] [--tcp ADDR] [flags]", summary: "serve MCP on stdio, Streamable HTTP (--http) and TCP (--tcp)", setup: serveCommand},
	{name: "rootfs", synopsis: "build|list|prune|verify [flags]", summary: "build, list, prune and verify language layers", setup: rootfsCommand},
	{name: "build", synopsis: "[--all | LANG...]", summary: "same as rootfs build", setup: buildCommand},
	{name: "image", synopsis: "import|list|rm [flags]", summary: "import OCI images (layouts, docker save archives) as run environments", setup: imageCommand},
	{name: "languages", synopsis: "[--json]", summary: "list the languages and whether their layers are built", setup: languagesCommand},
	{name: "doctor", synopsis: "[--json]", summary: "check what this host supports and how to fix what is missing", setup: doctorCommand},
	{name: "setup", synopsis: "--user NAME [--memory SIZE] [--pids N] [--remove]", summary: "as root: delegate a cgroup subtree to a user (rootless with every limit)", setup: setupCommand},
}

// usage is the top-level help, generated from commands.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: sandcell [global flags] <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'sandcell <command> -h' for the command's flags, 'sandcell -h' for the global ones.\n" +
		"The benchmark harness is its own binary: sandcell-bench (make bench).\n")
	return b.String()
}

// cliEnv is what every command gets: its streams and the configuration.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	log            *slog.Logger
	cfg            config.Config
}

// run is the whole CLI, testable without a process: it returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	global := flag.NewFlagSet("sandcell", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.Usage = func() {
		fmt.Fprint(stderr, usage())
		fmt.Fprintln(stderr, "\nglobal flags:")
		global.PrintDefaults()
	}
	cfg := config.Default()
	cfg.AddFlags(global)
	logLevel := global.String("log-level", "warn", "log level on stderr: debug, info, warn, error")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "sandcell: bad --log-level %q\n", *logLevel)
		return 2
	}
	env := &cliEnv{
		stdin: stdin, stdout: stdout, stderr: stderr, cfg: cfg,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	for _, c := range commands {
		if c.name == rest[0] {
			return env.dispatch(ctx, c, rest[1:])
		}
	}
	fmt.Fprintf(stderr, "sandcell: unknown command %q\n\n%s", rest[0], usage())
	return 2
}

// dispatch is the prologue every command shares: its flags, -h, parse
// errors (exit 2), then the command.
func (e *cliEnv) dispatch(ctx context.Context, c command, args []string) int {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: sandcell %s %s\n\n%s.\n", c.name, c.synopsis, c.summary)
		if hasFlags(fs) {
			fmt.Fprintln(e.stderr, "\nflags:")
			fs.PrintDefaults()
		}
	}
	body := c.setup(fs, e)
	var pos []string
	var err error
	if c.interspersed {
		pos, err = parseInterspersed(fs, args)
	} else {
		err = fs.Parse(args)
		pos = fs.Args()
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	return body(ctx, pos)
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// usageError prints a usage mistake of command name and returns 2.
func (e *cliEnv) usageError(name, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "sandcell %s: %s\n", name, fmt.Sprintf(format, args...))
	return 2
}

// noArgs refuses positional arguments for a command that takes none.
func (e *cliEnv) noArgs(name string, args []string) bool {
	if len(args) > 0 {
		e.usageError(name, "unexpected argument %q", args[0])
		return false
	}
	return true
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
