package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/cmd/internal/metrics"
	"github.com/sandcell/sandcell/e2b"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/internal/health"
	"github.com/sandcell/sandcell/internal/version"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rest"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/service"
)

// serveCommand: sandcell serve [--stdio] [--http ADDR] [--tcp ADDR]
// [--auth-token-file F] [--allow-origin ORIGIN]...
//
// Serves MCP on stdio (the default when no other transport is given), on
// Streamable HTTP at http://ADDR/mcp, and on raw newline-delimited JSON over
// TCP; several at once. Every tool call runs in a fresh sandbox. Returns
// when stdin ends (stdio) or on SIGTERM/SIGINT, after cancelling every run.
func serveCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	var sc config.Serve
	sc.AddFlags(fs)
	return func(ctx context.Context, args []string) int {
		if !env.noArgs("serve", args) {
			return 2
		}
		if err := sc.Validate(); err != nil {
			return env.usageError("serve", "%v", err)
		}
		return serve(ctx, env, sc)
	}
}

// serve wires the server (executor, sessions, gate, MCP) and serves it on
// the transports asked for until stdin ends (stdio) or ctx does (after a
// drain of at most sc.DrainTimeout).
func serve(ctx context.Context, env *cliEnv, sc config.Serve) int {
	stdio, httpAddr, tcpAddr, tokenFile, origins, drainTimeout := sc.Stdio, sc.HTTP, sc.TCP, sc.AuthTokenFile, sc.AllowOrigins, sc.DrainTimeout
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
	if err := prebuild(ctx, env, svc.exec.Executor, sc.Prebuild); err != nil {
		return env.fail(err)
	}
	srv := service.NewServer(svc.Service, service.ServerOptions{Version: version.String(), NoInstall: env.cfg.Deps.Off, Network: len(env.cfg.Network.Allow) > 0})
	liveREST := rest.Options{NetworkAllow: env.cfg.Network.Allow} // the sandbox tool offers network under a ceiling
	// One interp.Manager holds the live sandboxes' code contexts for every
	// front end (MCP's run_cell, E2B's code interpreter).
	contexts := contextsOf(liveSandboxesOf(svc), env.log)
	setLiveBase := liveFrontEnds(liveSandboxesOf(svc), contexts, srv, &liveREST, sc)

	// ctx ends at SIGTERM/SIGINT; the server's life, one drain later.
	signalled := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	drain := &health.Drainer{Busy: svc.Runs}
	go func() {
		select {
		case <-signalled.Done():
		case <-ctx.Done():
			return
		}
		if drainTimeout > 0 {
			env.log.Info("draining: new sessions are refused, requests in flight finish", "timeout", drainTimeout)
			dctx, dcancel := context.WithTimeout(ctx, drainTimeout)
			if err := drain.Drain(dctx); err != nil {
				env.log.Warn("the drain timed out: cancelling what still runs", "err", err)
			}
			dcancel()
		}
		cancel()
	}()
	go svc.ExpireSessions(ctx)
	// Every transport also serves `sandcell run` on a control socket in
	// the instance's directory (control.go), gone with the instance. A
	// server without it (no runc instance: wasm only) still serves.
	if lc := svc.exec.Runtimes.Libcontainer(); lc != nil {
		if ctl, err := listenControl(filepath.Join(env.cfg.StateDir, lc.Instance()), env.log); err != nil {
			env.log.Warn("no control socket: `sandcell run` will not use this server", "err", err)
		} else {
			defer ctl.Close()
			go ctl.serve(ctx, controlHandler(env.cfg.LayerDir, svc.exec.Execute, svc.Admit(), drain))
		}
	}
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
		ln = drain.Listener(netutil.LimitListener(ln, maxConns))
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
		mux.Handle("/mcp", drain.Wrap(h))
		drain.Handle(mux) // /healthz, /readyz
		mux.Handle("/metrics", h.Guard(svc.metrics.Handler()))
		// Piston's and Judge0's REST APIs on the same listener, under the
		// same Origin and token rules (h.Check), the same executor and gate.
		// Live sandboxes' API and port proxy too (liveFrontEnds), if the
		// service has them.
		rh := rest.New(rest.Options{Executor: svc.exec, Admit: svc.Admit(), Guard: h.Check,
			Languages: rest.BuiltLanguages(svc.exec.LayerStore), Ceilings: env.cfg.Ceilings,
			Workers: env.cfg.MaxRuns, Logger: env.log,
			Judge0Callbacks: egress.Config{Allow: sc.Judge0CallbackAllow, Hosts: env.cfg.Deps.Hosts, Logger: env.log, Labels: []any{"judge0", "callback"}},
			NetworkAllow:    liveREST.NetworkAllow,
			Sandboxes:       liveREST.Sandboxes, SandboxDomain: liveREST.SandboxDomain})
		defer rh.Close()
		mux.Handle("/", drain.Wrap(rh))
		setLiveBase(ln.Addr())
		// Header, body (mcp.HTTPOptions.BodyTimeout) and keep-alive idle
		// time are bounded, and so are the connections at once; no
		// ReadTimeout: net/http applies it to the whole connection, so a
		// tool call longer than it would be cancelled.
		var root http.Handler = rh.PortHosts(mux)
		if sc.E2B {
			// The service is handed over as api.Sandboxes (and its kernels
			// as e2b.Kernels, through e2bKernels): e2b names no
			// implementation.
			sb := liveSandboxesOf(svc)
			if sb == nil {
				return env.fail(errors.New("--e2b: this server holds no live sandboxes (issue #39)"))
			}
			k := e2bKernels(contexts)
			store := svc.exec.LayerStore
			tmpl := e2b.TemplatesFor(func(lang string) bool {
				l, err := rootfs.Lookup(lang)
				if err != nil || store == nil {
					return false
				}
				ok, err := store.Built(l)
				return err == nil && ok
			}, env.log)
			e2bh, err := mountE2B(root, sb, k, tmpl, sc, env.log)
			if err != nil {
				return env.fail(err)
			}
			// Not under drain.Wrap: its rule (a POST without an MCP
			// session is a new session) would refuse E2B's every RPC.
			root = e2bh
			env.log.Info("serving E2B's APIs", "E2B_API_URL", "http://"+ln.Addr().String(), "kernels", k != nil)
			if !loopback {
				env.log.Warn("E2B's API keys and sandbox tokens travel in clear over plain HTTP on a non-loopback address: put TLS in front", "addr", ln.Addr().String())
			}
		}
		hs := &http.Server{Handler: root, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		ln = netutil.LimitListener(ln, maxConns)
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

// maxConns bounds the connections of each network transport (HTTP, TCP)
// at once: each is an fd and a goroutine or two, and a local client could
// otherwise open them until the server reaches its fd limit (issue #17).
// Past it, new connections wait in the listener's backlog.
const maxConns = 256

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

// served is the wired server: the MCP sandbox over the executor, and the
// metrics that observe it.
type served struct {
	*service.Service
	exec    *config.Opened
	metrics *metrics.Metrics
}

// openService wires the MCP sandbox: the admission gate, the executor
// (whose warm pool yields to the gate, and whose every request the metrics
// count) and the sessions' store.
func openService(env *cliEnv) (*served, func(), error) {
	if err := env.cfg.Validate(); err != nil {
		return nil, nil, err
	}
	gate := service.NewGate(env.cfg.MaxRuns, env.cfg.MaxQueue)
	var (
		e       *config.Opened
		ws      *workspace.Store
		kernels func() int
	)
	m := metrics.New(metrics.Sources{
		Live: func() int { return e.Runtimes.Live() },
		Sessions: func() int {
			ms, _ := ws.List()
			return len(ms)
		},
		Kernels: func() int { return kernels() },
		Pool:    func() (backend.PoolStats, int) { return e.Runtimes.PoolStats() },
	})
	e, err := env.cfg.OpenExecutor(env.log, func() bool { return gate.Queued() > 0 }, func(o *executor.Options) {
		o.Observe, o.Deps.EgressRefused = m.Observe, m.EgressRefused
	})
	if err != nil {
		return nil, nil, err
	}
	uid, gid := e.SandboxIDs()
	ws, err = workspace.Open(env.cfg.SessionsPath(), workspace.Options{
		UID: int(uid), GID: int(gid),
		Quota: env.cfg.SessionQuota, TTL: env.cfg.SessionTTL, MaxTTL: env.cfg.SessionMaxTTL,
		MaxSessions: env.cfg.MaxSessions, MaxPerClient: env.cfg.MaxSessionsPerClient, Logger: env.log,
	})
	if err != nil {
		e.Close()
		return nil, nil, fmt.Errorf("sessions: %w", err)
	}
	svc := service.New(e.Executor, ws, gate, env.log)
	svc.SetKernelOptions(service.KernelOptions{Max: env.cfg.MaxKernels, Idle: env.cfg.KernelIdle})
	svc.SetSandboxOptions(service.SandboxOptions{Max: env.cfg.MaxSandboxes, Dir: env.cfg.SandboxesPath(), KeepFiles: env.cfg.SandboxKeep})
	kernels = svc.LiveKernels
	return &served{svc, e, m}, func() { svc.Close(); e.Close() }, nil
}

// prebuild builds the layers of langs before the server takes calls
// (serve --prebuild): a first call then never waits for a build.
func prebuild(ctx context.Context, env *cliEnv, e *executor.Executor, langs []string) error {
	for _, name := range langs {
		l, err := rootfs.Lookup(name)
		if err != nil {
			return fmt.Errorf("--prebuild: %w", err)
		}
		start := time.Now()
		if _, err := e.Root(ctx, l); err != nil {
			return fmt.Errorf("--prebuild %s: %w", name, err)
		}
		env.log.Info("layers ready", "language", l.Name, "ms", time.Since(start).Milliseconds())
	}
	return nil
}

// controlHandler runs the control socket's requests (`sandcell run`)
// with execute (the server's executor) through admit (its gate, as
// every call). A run for another home, during a drain, or refused as
// busy goes back to the client, which runs it itself.
func controlHandler(home string, execute func(context.Context, executor.Request) (api.Result, error),
	admit func(context.Context) (func(), error), drain *health.Drainer) func(context.Context, controlRequest) controlReply {
	home = filepath.Clean(home)
	return func(ctx context.Context, req controlRequest) controlReply {
		switch {
		case filepath.Clean(req.Home) != home:
			return controlReply{Fallback: "this server's home is " + home}
		case drain.Draining() || ctx.Err() != nil:
			return controlReply{Fallback: "the server is shutting down"}
		}
		res, err := execute(ctx, executor.Request{Request: req.Run.request(), Admit: admit})
		switch {
		case errors.Is(err, api.ErrBusy):
			return controlReply{Fallback: err.Error()}
		case err != nil:
			return controlReply{Error: err.Error()}
		}
		return controlReply{Result: &res, Notes: res.Notes}
	}
}
