package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/sandcell/sandcell/rootfs"
)

// cmdBuild: sandcell build [LANG...] builds the language layers (all when
// none is named). Existing layers are kept.
func cmdBuild(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var langs []rootfs.Language
	if fs.NArg() == 0 {
		langs = rootfs.Languages()
	}
	for _, name := range fs.Args() {
		l, err := rootfs.Lookup(name)
		if err != nil {
			return env.fail(err)
		}
		langs = append(langs, l)
	}
	store := &rootfs.Store{Dir: env.cfg.LayerDir, Logger: env.log}
	for _, l := range langs {
		start := time.Now()
		if err := store.Build(ctx, l); err != nil {
			return env.fail(fmt.Errorf("build %s: %w", l.Name, err))
		}
		fmt.Fprintf(env.stdout, "%s: ready (%s)\n", l.Name, time.Since(start).Round(10*time.Millisecond))
	}
	return 0
}

// cmdLanguages: sandcell languages lists the catalogue and which layers exist.
func cmdLanguages(_ context.Context, env *cliEnv, _ []string) int {
	store := &rootfs.Store{Dir: env.cfg.LayerDir, Logger: env.log}
	w := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LANGUAGE\tALIASES\tLAYER")
	for _, l := range rootfs.Languages() {
		state := "built"
		if _, err := store.Root(l); err != nil {
			state = "not built (sandcell build " + l.Name + ")"
		}
		fmt.Fprintf(w, "%s\t%v\t%s\n", l.Name, l.Aliases, state)
	}
	w.Flush()
	return 0
}
