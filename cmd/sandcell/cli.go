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

	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/internal/version"
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
	// configured: the config file (--config) sets this command's flags
	// too (serve's), not only the global ones.
	configured bool
	// hidden commands (man, completion) are left out of the help.
	hidden bool
	setup  func(fs *flag.FlagSet, env *cliEnv) func(ctx context.Context, args []string) int
	// subs are commands named by a second word ("batch merge"), each
	// with flags of its own.
	subs []command
}

// commands are sandcell's subcommands, in the order of the help. They are
// set by init: man and completion read the table (an initialization cycle
// if it were a var's initializer).
var commands []command

func init() { commands = commandTable() }

func commandTable() []command {
	return []command{
		{name: "run", synopsis: "(--lang LANG (--code STRING | FILE) | --image NAME [-- ARGS]) [flags]", summary: "run one program in a fresh sandbox", interspersed: true, setup: runCommand},
		{name: "batch", synopsis: "(--in FILE.jsonl[.gz] | --humaneval PATH) --out RESULTS.jsonl [flags]", summary: "run a JSON-lines file of programs (or HumanEval-X) and judge them", setup: batchCommand,
			subs: []command{{name: "merge", synopsis: "(--in FILE | --humaneval PATH [--lang L] [--samples S]) --out MERGED.jsonl [--summary S.json] SHARD.jsonl...", summary: "combine the results of `batch --shard K/N` into one file and a summary (verdicts, languages, pass@k, throughput)", setup: batchMergeCommand}}},
		{name: "serve", synopsis: "[--stdio] [--http ADDR] [--tcp ADDR] [flags]", summary: "serve MCP on stdio, Streamable HTTP (--http) and TCP (--tcp)", configured: true, setup: serveCommand},
		{name: "rootfs", synopsis: "build|list|prune|verify [flags]", summary: "build, list, prune and verify language layers", setup: rootfsCommand, subs: rootfsCommands},
		{name: "build", synopsis: "[--all | LANG...]", summary: "same as rootfs build", setup: buildCommand},
		{name: "image", synopsis: "import|list|rm [flags]", summary: "import OCI images (layouts, docker save archives) as run environments", setup: imageCommand, subs: imageCommands},
		{name: "port-forward", synopsis: "[--server URL] [--auth-token-file F] [--listen ADDR] SANDBOX PORT", summary: "reach a TCP port of a live sandbox on a local address, through the server", setup: portForwardCommand},
		{name: "languages", synopsis: "[--json]", summary: "list the languages and whether their layers are built", setup: languagesCommand},
		{name: "doctor", synopsis: "[--json]", summary: "check what this host supports and how to fix what is missing", setup: doctorCommand},
		{name: "config", synopsis: "check FILE | show", summary: "validate a config file, or print the effective configuration", setup: configCommand},
		{name: "setup", synopsis: "--user NAME [--memory SIZE] [--pids N] [--remove]", summary: "as root: delegate a cgroup subtree to a user (rootless with every limit)", setup: setupCommand},
		{name: "man", summary: "print the man page (generated from this table)", hidden: true, setup: manCommand},
		{name: "completion", synopsis: "bash|zsh", summary: "print the shell completions", hidden: true, setup: completionCommand},
	}
}

// usage is the top-level help, generated from commands.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: sandcell [--config FILE] [global flags] <command> [flags]\n       sandcell --version\n\ncommands:\n")
	for _, c := range commands {
		if c.hidden {
			continue
		}
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
	// file is the --config file (nil: none); global the global flags
	// (config show prints them).
	file   *config.File
	global *flag.FlagSet
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
	env := &cliEnv{stdin: stdin, stdout: stdout, stderr: stderr, cfg: config.Default(), global: global}
	env.cfg.AddFlags(global)
	configPath := global.String("config", "", "read settings from this TOML file (keys: the flags' names; flags given here win; see 'sandcell config show')")
	showVersion := global.Bool("version", false, "print the version and the commit it was built from")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "sandcell %s\n", versionLine())
		return nil, 0
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage())
		return nil, 2
	}
	if *configPath != "" {
		f, err := config.ReadFile(*configPath)
		if err == nil {
			err = f.Apply([]*flag.FlagSet{global}, configurable(env), visited(global))
		}
		if err != nil {
			fmt.Fprintf(stderr, "sandcell: --config: %v\n", err)
			return nil, 2
		}
		env.file = f
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(env.cfg.LogLevel)); err != nil {
		fmt.Fprintf(stderr, "sandcell: bad --log-level %q\n", env.cfg.LogLevel)
		return nil, 2
	}
	env.log = slog.New(requestIDHandler{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})})
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
	if c.configured && e.file != nil {
		if err := e.file.Apply([]*flag.FlagSet{fs}, configurable(e), visited(fs)); err != nil {
			fmt.Fprintf(e.stderr, "sandcell %s: --config: %v\n", c.name, err)
			return nil, 2
		}
	}
	return &commandLine{env: e, cmd: c, fs: fs, pos: pos, body: body}, 0
}

// visited is whether fs's command line set the flag name: those win over
// the config file.
func visited(fs *flag.FlagSet) func(string) bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return func(name string) bool { return set[name] }
}

// configurable are the flag sets a config file may set: the global flags
// and serve's (the configured command's: config.Serve).
func configurable(e *cliEnv) []*flag.FlagSet {
	serve := flag.NewFlagSet("serve", flag.ContinueOnError)
	new(config.Serve).AddFlags(serve)
	return []*flag.FlagSet{e.global, serve}
}

// versionLine is the version and the commit the binary was built from.
func versionLine() string {
	if c := version.Commit(); c != "" {
		return version.Release() + " (commit " + c + ")"
	}
	return version.Release()
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// subcommandUsage is the body of a command that only groups subcommands
// (parse dispatches "NAME SUB"): it names an unknown one and lists them.
func (e *cliEnv) subcommandUsage(name string, cmds []command, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(e.stderr, "sandcell %s: unknown command %q\n", name, args[0])
	}
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	fmt.Fprintf(e.stderr, "usage: sandcell %s %s [flags]\n", name, strings.Join(names, "|"))
	for _, c := range cmds {
		fmt.Fprintf(e.stderr, "  %-8s %s\n", c.name, c.summary)
	}
	return 2
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
// arguments ("run FILE --json" and "run --json FILE" both work). A "--"
// ends the flags: everything after it is positional ("run --image X -- sh
// -c 'echo hi'").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if endedByDashDash(fs, args[:len(args)-len(rest)]) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// endedByDashDash is whether fs.Parse, having consumed these arguments,
// stopped at a "--" (which it drops) rather than at a positional argument:
// whether the last one is a "--" where a flag was due, not a flag's value
// ("--code --").
func endedByDashDash(fs *flag.FlagSet, consumed []string) bool {
	for i := 0; i < len(consumed); i++ {
		s := consumed[i]
		if s == "--" {
			return true
		}
		name := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				continue
			}
		}
		i++ // the flag's value
	}
	return false
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
