package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"strconv"

	"github.com/sandcell/sandcell/limits"
)

// setupCommand: sandcell setup --user NAME [--memory SIZE] [--pids N] [--remove]
//
// Run once as root: delegates a cgroup subtree to NAME so that NAME's
// rootless sandcell enforces every limit (tier 2). The subtree's own
// limits (--memory, --pids: the ceilings of all of NAME's sandboxes
// together) stay owned by root; only the children are NAME's.
func setupCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	name := fs.String("user", "", "the user to delegate a cgroup subtree to (required)")
	memory := fs.String("memory", "", "memory ceiling of the user's sandboxes together (default: a quarter of the host's memory)")
	pids := fs.Int64("pids", 4096, "pids ceiling of the user's sandboxes together")
	remove := fs.Bool("remove", false, "remove the user's subtree instead (it must hold no process)")
	return func(_ context.Context, args []string) int {
		if *name == "" || len(args) > 0 {
			fmt.Fprintln(env.stderr, "usage: sandcell setup --user NAME [--memory SIZE] [--pids N] [--remove]")
			return 2
		}
		return setup(env, *name, *memory, *pids, *remove)
	}
}

// setup delegates (or, remove, takes back) a cgroup subtree for the user
// name.
func setup(env *cliEnv, name, memory string, pids int64, remove bool) int {
	if os.Geteuid() != 0 {
		return env.fail(errors.New("setup delegates a cgroup subtree: run it as root (sudo sandcell setup --user " + name + ")"))
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return env.fail(fmt.Errorf("--user %s: no such user", name))
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	mem := limits.HostMemory() / 4
	if memory != "" {
		if mem, err = limits.ParseSize(memory); err != nil {
			return env.fail(fmt.Errorf("--memory: %w", err))
		}
	}
	cfg := limits.DelegateConfig{UID: uid, GID: gid, User: u.Username, MemoryBytes: mem, Pids: pids, Logger: env.log}
	if remove {
		if err := limits.Undelegate(cfg); err != nil {
			return env.fail(err)
		}
		fmt.Fprintf(env.stdout, "removed the cgroup subtree of %s\n", name)
		return 0
	}
	res, err := limits.Delegate(cfg)
	if err != nil {
		return env.fail(err)
	}
	fmt.Fprintf(env.stdout, "delegated cgroup %s to %s (uid %d): memory %s, pids %d for all of its sandboxes\n",
		res.Path, name, uid, limits.FormatSize(mem), pids)
	if res.Instructions != "" {
		fmt.Fprintln(env.stdout, res.Instructions)
	}
	return 0
}
