// Binary sandcell runs untrusted programs in fresh, locked-down OCI
// containers that it builds itself, through runc's libcontainer in-process,
// and serves them to AI agents over the Model Context Protocol.
//
// Synopsis:
//
//	sandcell [global flags] run --lang LANG (--code STRING | FILE) [flags]   run one program (--image NAME: in an image)
//	sandcell [global flags] batch (--in FILE | --humaneval PATH) --out FILE   run and judge a file of programs
//	sandcell [global flags] batch --shard K/N ...                             run shard K of N of it
//	sandcell batch merge (--in FILE | --humaneval PATH) --out FILE SHARD...   merge the shards' results
//	sandcell [global flags] serve [--stdio] [--http ADDR] [--tcp ADDR]        serve MCP
//	sandcell port-forward [--server URL] SANDBOX PORT                         reach a live sandbox's TCP port locally
//	sandcell [global flags] rootfs build|list|prune|verify                    manage the language layers
//	sandcell [global flags] build [--all | LANG...]                           same as rootfs build
//	sandcell [global flags] image import|list|rm                              manage imported OCI images
//	sandcell [global flags] languages [--json]                                list the languages
//	sandcell [global flags] doctor [--json]                                   check the host
//	sandcell [global flags] config check FILE | show                          validate a config file, show the effective one
//	sandcell setup --user NAME                                                delegate a cgroup subtree (as root)
//
// Every global flag and every flag of serve can also come from a TOML file
// (--config FILE; the flags' names are its keys; the command line wins).
// `sandcell --version` prints the release and commit. `sandcell -h` lists
// the global flags, `sandcell CMD -h` a command's
// (both generated from the command table in cli.go; TestPackageDocLists
// keeps this list in step with it). The benchmark harness is a binary of
// its own, cmd/sandcell-bench. Logs go to stderr (log/slog). See README.md.
//
// This package is flags and wiring: a request's path runs through
// package service (MCP), batch, executor and oci.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/oci/backend"
)

// init is libcontainer's re-exec hook: the container's first process is this
// binary started as "sandcell init", which sets up the container from the
// inside and then execs the program. It must run before anything else.
func init() {
	backend.Init()
	// The fill helper: a run's /work is written by a child process in the
	// run's memory cgroup, which copies a session's tree with package
	// workspace (oci/backend/fill_linux.go).
	backend.InitFill(workspace.FillFrom)
}

func main() {
	// An unprivileged sandcell runs in its own user namespace
	// (rootless.go): this process only waits for that one.
	if code, done := enterUserNS(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); done {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
