package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/sandcell/sandcell/rest"
)

// maxForwards bounds the connections `sandcell port-forward` carries at
// once: each is two sockets and two goroutines here and a slot of the
// sandbox's (rest.Options.MaxPortConns) on the server.
const maxForwards = 64

// portForwardCommand: sandcell port-forward [--server URL]
// [--auth-token-file F] [--listen ADDR] SANDBOX PORT listens on a local
// address (127.0.0.1:PORT by default) and carries each connection to PORT
// of a live sandbox through the server's TCP upgrade
// (/v1/sandboxes/ID/ports/PORT/tcp), until interrupted: a database or any
// TCP server in the sandbox is then reachable as if it ran here.
func portForwardCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	server := fs.String("server", "http://127.0.0.1:8080", "the sandcell server (serve --http)")
	tokenFile := fs.String("auth-token-file", "", "the server's bearer token, read from this file")
	listen := fs.String("listen", "", "local address to listen on (default 127.0.0.1:PORT; a bare :N binds 127.0.0.1)")
	return func(ctx context.Context, args []string) int {
		if len(args) != 2 {
			return env.usageError("port-forward", "give SANDBOX PORT (e.g. sandcell port-forward sb1 5432)")
		}
		id, port := args[0], args[1]
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return env.usageError("port-forward", "port %q: give a number from 1 to 65535", port)
		}
		var token string
		if *tokenFile != "" {
			b, err := readCapped(*tokenFile, nil, 4096)
			if err != nil {
				return env.fail(fmt.Errorf("--auth-token-file: %w", err))
			}
			token = strings.TrimSpace(string(b))
		}
		addr := *listen
		if addr == "" {
			addr = ":" + port
		}
		ln, err := net.Listen("tcp", loopbackDefault(addr))
		if err != nil {
			return env.fail(fmt.Errorf("port-forward: %w", err))
		}
		// Check once that the server, the sandbox and the port answer,
		// so a mistake shows now rather than at the first connection.
		c, err := rest.DialPortThrough(ctx, *server, token, id, n)
		if err != nil {
			ln.Close()
			return env.fail(err)
		}
		c.Close()
		fmt.Fprintf(env.stderr, "forwarding %s to port %d of sandbox %s through %s (Ctrl-C ends it)\n", ln.Addr(), n, id, *server)
		forwardPorts(ctx, ln, func(ctx context.Context) (net.Conn, error) {
			return rest.DialPortThrough(ctx, *server, token, id, n)
		}, env.log)
		return 0
	}
}

// forwardPorts accepts on ln until ctx ends and splices each connection
// with one dial gives, at most maxForwards at once.
func forwardPorts(ctx context.Context, ln net.Listener, dial func(context.Context) (net.Conn, error), log *slog.Logger) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	slots := make(chan struct{}, maxForwards)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		slots <- struct{}{}
		local, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				log.Warn("port-forward: accept failed", "err", err)
			}
			ln.Close()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer local.Close()
			remote, err := dial(ctx)
			if err != nil {
				log.Warn("port-forward: a connection was refused", "err", err)
				return
			}
			stop := context.AfterFunc(ctx, func() { local.Close(); remote.Close() })
			defer stop()
			rest.Splice(local, local, remote)
		}()
	}
}
