package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/service"
)

// version is the serverInfo version (set with -ldflags -X main.version=...).
var version = "dev"

// serveCommand: sandcell serve [--stdio] [--http ADDR] [--tcp ADDR]
// [--auth-token-file F] [--allow-origin ORIGIN]...
//
// Serves MCP on stdio (the default when no other transport is given), on
// Streamable HTTP at http://ADDR/mcp, and on raw newline-delimited JSON over
// TCP; several at once. Every tool call runs in a fresh sandbox. Returns
// when stdin ends (stdio) or on SIGTERM/SIGINT, after cancelling every run.
func serveCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	var (
		stdio             bool
		httpAddr, tcpAddr string
		tokenFile         string
		origins           multiFlag
	)
	fs.BoolVar(&stdio, "stdio", false, "serve on stdin/stdout (the default when neither --http nor --tcp is given)")
	fs.StringVar(&httpAddr, "http", "", "serve Streamable HTTP on ADDR at /mcp (e.g. 127.0.0.1:8080; a bare :PORT binds 127.0.0.1)")
	fs.StringVar(&tcpAddr, "tcp", "", "serve newline-delimited JSON on TCP ADDR (e.g. 127.0.0.1:3000; a bare :PORT binds 127.0.0.1)")
	fs.StringVar(&tokenFile, "auth-token-file", "", "require 'Authorization: Bearer TOKEN' on HTTP, TOKEN read from this file")
	fs.Var(&origins, "allow-origin", "browser Origin allowed on HTTP besides loopback ones (repeatable; * for any)")
	return func(ctx context.Context, args []string) int {
		if !env.noArgs("serve", args) {
			return 2
		}
		return serve(ctx, env, stdio, httpAddr, tcpAddr, tokenFile, origins)
	}
}

// serve wires the server (executor, sessions, gate, MCP) and serves it on
// the transports asked for until stdin ends (stdio) or ctx does.
func serve(ctx context.Context, env *cliEnv, stdio bool, httpAddr, tcpAddr, tokenFile string, origins []string) int {
	if httpAddr == "" && tcpAddr == "" {
		stdio = true
	}
	var token string
	if tokenFile != "" {
		b, err := readCapped(tokenFile, nil, 4096)
		if err != nil {
			return env.fail(fmt.Errorf("--auth-token-file: %w", err))
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return env.fail(fmt.Errorf("--auth-token-file %s is empty", tokenFile))
		}
	}

	env.cfg.ForServe()
	svc, closeSvc, err := openService(env)
	if err != nil {
		return env.fail(err)
	}
	defer closeSvc()
	srv := service.NewServer(svc, service.ServerOptions{Version: version, NoInstall: env.cfg.Deps.Off})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go svc.ExpireSessions(ctx)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	if tcpAddr != "" {
		ln, err := net.Listen("tcp", loopbackDefault(tcpAddr))
		if err != nil {
			return env.fail(fmt.Errorf("--tcp: %w", err))
		}
		env.log.Info("serving MCP on TCP", "addr", ln.Addr().String())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.ServeTCP(ctx, ln); err != nil {
				fail(err)
			}
		}()
	}
	if httpAddr != "" {
		ln, err := net.Listen("tcp", loopbackDefault(httpAddr))
		if err != nil {
			return env.fail(fmt.Errorf("--http: %w", err))
		}
		loopback := isLoopbackAddr(ln.Addr())
		if !loopback && token == "" {
			env.log.Warn("HTTP is served on a non-loopback address without --auth-token-file: anyone who can reach it can run code", "addr", ln.Addr().String())
		}
		h := mcp.NewHTTPHandler(srv, &mcp.HTTPOptions{AllowedOrigins: origins, AnyHost: !loopback, AuthToken: token})
		mux := http.NewServeMux()
		mux.Handle("/mcp", h)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		env.log.Info("serving MCP on HTTP", "url", "http://"+ln.Addr().String()+"/mcp")
		wg.Add(1)
		go func() {
			defer wg.Done()
			go func() {
				<-ctx.Done()
				h.Close()
				sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer scancel()
				hs.Shutdown(sctx)
			}()
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fail(err)
			}
		}()
	}
	if stdio {
		// stdio decides the server's life: end of input ends it.
		if err := srv.ServeStream(ctx, env.stdin, env.stdout); err != nil && !errors.Is(err, context.Canceled) {
			fail(err)
		}
		cancel()
	}
	<-ctx.Done()
	wg.Wait()
	if firstErr != nil {
		return env.fail(firstErr)
	}
	return 0
}

// loopbackDefault turns ":PORT" into "127.0.0.1:PORT": listening on every
// interface must be asked for explicitly (0.0.0.0:PORT).
func loopbackDefault(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

func isLoopbackAddr(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// openService wires the MCP sandbox: the admission gate, the executor
// (whose warm pool yields to the gate) and the sessions' store.
func openService(env *cliEnv) (*service.Service, func(), error) {
	gate := service.NewGate(env.cfg.MaxRuns, env.cfg.MaxQueue)
	e, err := env.cfg.OpenExecutor(env.log, func() bool { return gate.Queued() > 0 })
	if err != nil {
		return nil, nil, err
	}
	uid, gid := e.SandboxIDs()
	ws, err := workspace.Open(env.cfg.SessionsPath(), workspace.Options{
		UID: int(uid), GID: int(gid),
		Quota: env.cfg.SessionQuota, TTL: env.cfg.SessionTTL, Logger: env.log,
	})
	if err != nil {
		e.Close()
		return nil, nil, fmt.Errorf("sessions: %w", err)
	}
	return service.New(e, ws, gate, env.log), func() { e.Close() }, nil
}
