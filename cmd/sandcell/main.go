// Binary sandcell runs untrusted programs in fresh, locked-down OCI
// containers that it builds itself, through runc's libcontainer in-process.
//
// Synopsis:
//
//	sandcell run --lang LANG (--code STRING | FILE) [flags]   run one program
//	sandcell build [LANG...]                                 build language layers
//	sandcell doctor [--json]                                 check the host
//	sandcell bench [flags]                                   side-by-side latency and throughput benchmark
//	sandcell languages                                       list the languages
//
// Logs go to stderr (log/slog). See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandcell/sandcell/oci"
)

// init is libcontainer's re-exec hook: the container's first process is this
// binary started as "sandcell init", which sets up the container from the
// inside and then execs the program. It must run before anything else.
func init() {
	oci.Init()
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
