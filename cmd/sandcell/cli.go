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
	// subs are commands named by a second word ("batch merge"), each
	// with flags of its own.
	subs []command
}

// commands are sandcell's subcommands, in the order of the help.
var commands = []command{
	{name: "run", synopsis: "--lang LANG (--code STRING | FILE) [flags]", summary: "run one program in a fresh sandbox", interspersed: true, setup: runCommand},
	{name: "batch", synopsis: "(--in FILE.jsonl[.gz] | --humaneval PATH) --out RESULTS.jsonl [flags]", summary: "run a JSON-lines file of programs (or HumanEval-X) and judge them", setup: batchCommand,
		subs: []command{{name: "merge", synopsis: "(--in FILE | --humaneval PATH [--lang L] [--samples S]) --out MERGED.jsonl [--summary S.json] SHARD.jsonl...", summary: "combine the results of `batch --shard K/N` into one file and a summary (verdicts, languages, pass@k, throughput)", setup: batchMergeCommand}}},
	{name: "serve", synopsis: "[--stdio] [--http ADDR] [--tcp ADDR] [flags]", summary: "serve MCP on stdio, Streamable HTTP (--http) and TCP (--tcp)", setup: serveCommand},
	{name: "rootfs", synopsis: "build|list|prune|verify [flags]", summary: "build, list, prune and verify language layers", setup: rootfsCommand, subs: rootfsCommands},
	{name: "build", synopsis: "[--all | LANG...]", summary: "same as rootfs build", setup: buildCommand},
	{name: "languages", synopsis: "[--json]", summary: "list the languages and whether their layers are built", setup: languagesCommand},
	{name: "doctor", synopsis: "[--json]", summary: "check what this host supports and how to fix what is missing", setup: doctorCommand},
	{name: "setup", synopsis: "--user NAME [--memory SIZE] [--pids N] [--remove]", summary: "as root: delegate a cgroup subtree to a user (rootless with every limit)", setup: setupCommand},
}

// usage is the top-level help, generated from commands.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: sandcell [global flags] <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-14s %s\n", c.name, c.summary)
		for _, sub := range c.subs {
			fmt.Fprintf(&b, "  %-14s %s\n", c.name+" "+sub.name, sub.summary)
		}
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
	cl, code := parse(args, stdin, stdout, stderr)
	if cl == nil {
		return code
	}
	return cl.body(ctx, cl.pos)
}

// commandLine is a command line taken apart: the environment (the global
// flags' configuration), the command, its flag set holding the values
// given, its positional arguments and the code that runs it.
type commandLine struct {
	env  *cliEnv
	cmd  command
	fs   *flag.FlagSet
	pos  []string
	body func(context.Context, []string) int
}

// parse takes a command line apart as run does, running nothing: nil and
// the exit status when it cannot (0 for -h, 2 for a usage mistake, which
// it printed). The prologue every command shares: global flags, the
// command (and its subcommand), its flags, -h.
func parse(args []string, stdin io.Reader, stdout, stderr io.Writer) (*commandLine, int) {
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
			return nil, 0
		}
		return nil, 2
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage())
		return nil, 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "sandcell: bad --log-level %q\n", *logLevel)
		return nil, 2
	}
	env := &cliEnv{
		stdin: stdin, stdout: stdout, stderr: stderr, cfg: cfg,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	for _, c := range commands {
		if c.name != rest[0] {
			continue
		}
		for _, sub := range c.subs {
			if len(rest) > 1 && rest[1] == sub.name {
				sub.name = c.name + " " + sub.name
				return env.parseCommand(sub, rest[2:])
			}
		}
		return env.parseCommand(c, rest[1:])
	}
	fmt.Fprintf(stderr, "sandcell: unknown command %q\n\n%s", rest[0], usage())
	return nil, 2
}

// parseCommand registers c's flags and parses args with them.
func (e *cliEnv) parseCommand(c command, args []string) (*commandLine, int) {
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
			return nil, 0
		}
		return nil, 2
	}
	return &commandLine{env: e, cmd: c, fs: fs, pos: pos, body: body}, 0
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
