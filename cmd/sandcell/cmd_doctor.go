package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/sandcell/sandcell/cmd/internal/doctor"
)

// doctorCommand: sandcell doctor [--json] reports what the host supports and,
// for each missing piece, the command that fixes it. Exit 1 when a required
// piece is missing.
func doctorCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	asJSON := fs.Bool("json", false, "print the report as JSON")
	return func(ctx context.Context, args []string) int {
		if !env.noArgs("doctor", args) {
			return 2
		}
		return report(env, doctor.Checks(ctx, &env.cfg), *asJSON)
	}
}

// report prints the doctor's checks; exit 1 when a required one failed.
func report(env *cliEnv, checks []doctor.Check, asJSON bool) int {
	failed := false
	for _, c := range checks {
		if c.Required && !c.OK {
			failed = true
		}
	}
	if asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"ok": !failed, "checks": checks})
	} else {
		for _, c := range checks {
			mark := "ok  "
			switch {
			case !c.OK && c.Required:
				mark = "FAIL"
			case !c.OK:
				mark = "warn"
			}
			fmt.Fprintf(env.stdout, "%s  %-16s %s\n", mark, c.Name, c.Detail)
			if !c.OK && c.Fix != "" {
				fmt.Fprintf(env.stdout, "      %-16s fix: %s\n", "", c.Fix)
			}
		}
	}
	if failed {
		return 1
	}
	return 0
}
