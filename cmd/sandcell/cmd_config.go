package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/sandcell/sandcell/cmd/internal/config"
)

// configCommand: sandcell config check FILE | show
//
// check reads FILE as `--config FILE` would and reports every problem with
// its line (exit 1); show prints the effective configuration (the
// defaults, the --config file, then the flags) as a config file.
func configCommand(_ *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	return func(_ context.Context, args []string) int {
		switch {
		case len(args) == 2 && args[0] == "check":
			f, err := config.ReadFile(args[1])
			if err == nil {
				// Apply to copies: check changes nothing of this process.
				probe := *env
				probe.cfg = config.Default()
				probe.global = flag.NewFlagSet("sandcell", flag.ContinueOnError)
				probe.cfg.AddFlags(probe.global)
				serve := flag.NewFlagSet("serve", flag.ContinueOnError)
				var sc config.Serve
				sc.AddFlags(serve)
				sets := []*flag.FlagSet{probe.global, serve}
				if err = f.Apply(sets, sets, nil); err == nil {
					err = errors.Join(probe.cfg.Validate(), sc.Validate())
				}
			}
			if err != nil {
				var n int
				for _, e := range unjoin(err) {
					fmt.Fprintln(env.stderr, e)
					n++
				}
				fmt.Fprintf(env.stderr, "sandcell config check: %s: %d problem(s)\n", args[1], n)
				return 1
			}
			fmt.Fprintf(env.stdout, "%s: ok (%d settings)\n", args[1], len(f.Keys()))
			return 0
		case len(args) == 1 && args[0] == "show":
			serve := flag.NewFlagSet("serve", flag.ContinueOnError)
			var sc config.Serve
			sc.AddFlags(serve)
			if env.file != nil {
				if err := env.file.Apply([]*flag.FlagSet{serve}, configurable(env), nil); err != nil {
					return env.fail(err)
				}
			}
			if err := config.Show(env.stdout, env.global, serve); err != nil {
				return env.fail(err)
			}
			return 0
		}
		return env.usageError("config", "give check FILE or show")
	}
}

// unjoin lists the errors errors.Join joined (or err itself).
func unjoin(err error) []error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		return j.Unwrap()
	}
	return []error{err}
}
