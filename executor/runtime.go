package executor

import (
	"fmt"

	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/seccomp"
)

// poolInterpreters are the languages whose interpreter a warm pool may
// start ahead of the program (backend.PoolConfig.Scripts). Only python: its
// start-up reads nothing of /work but its script (checked by
// oci.TestPoolIdentity). node reads /work/package.json before its main
// script, which a pre-started node would have read before the request's
// files were there.
var poolInterpreters = []string{"python"}

// openPool puts a warm pool in front of the libcontainer runtime
// (Options.PoolSize 0: none).
func (e *Executor) openPool() {
	if e.opts.PoolSize <= 0 {
		return
	}
	var scripts [][]string
	for _, name := range poolInterpreters {
		if l, err := rootfs.Lookup(name); err == nil && len(l.Compile) == 0 {
			scripts = append(scripts, l.Run)
		}
	}
	e.pool = backend.NewPool(e.rt, e.poolConfig(scripts))
}

// poolConfig is the warm pools' configuration.
func (e *Executor) poolConfig(scripts [][]string) backend.PoolConfig {
	return backend.PoolConfig{Size: e.opts.PoolSize, Idle: e.opts.PoolIdle, Scripts: scripts, Busy: e.opts.PoolBusy, Logger: e.log}
}

// gvisor returns the gVisor backend, making it on first use.
func (e *Executor) gvisor() (*backend.Runsc, error) {
	e.gvOnce.Do(func() {
		gf, err := seccomp.GVisorProfile()
		if err != nil {
			e.gvErr = err
			return
		}
		e.gv, e.gvErr = backend.NewRunsc(e.rt, backend.RunscConfig{Path: e.opts.Runsc, Platform: e.opts.RunscPlatform, AllowKVM: e.opts.RunscAllowKVM, Seccomp: gf})
		if e.gvErr == nil && e.opts.PoolSize > 0 {
			// gVisor's boot (runsc create, ~0.1 s) happens ahead, off
			// the request's path; see backend.NewGVisorPool.
			e.gvPool = backend.NewGVisorPool(e.gv, e.poolConfig(nil))
		}
		e.gvMade.Store(true)
	})
	return e.gv, e.gvErr
}

// Gvisor is the gVisor backend, made on first use (the benchmark harness
// and doctor ask for it).
func (e *Executor) Gvisor() (*backend.Runsc, error) {
	if e.opts.NoKernelSandbox != "" {
		return nil, e.noKernel("gvisor")
	}
	return e.gvisor()
}

// runtime decides which backend runs a request: the isolation it names
// ("" : the server's default), through the warm pool (runc's or gVisor's)
// unless fresh is set (the benchmark's fresh runner), and with every init
// started by libcontainer if direct is (its libcontainer runner).
func (e *Executor) runtime(isolation string, fresh, direct bool) (oci.Runtime, error) {
	if isolation == "" {
		isolation = e.opts.Isolation
	}
	if e.opts.NoKernelSandbox != "" && (isolation == "runc" || isolation == "gvisor") {
		return nil, e.noKernel(isolation)
	}
	switch isolation {
	case "wasm":
		return e.wasmRuntime()
	case "runc":
		switch {
		case direct:
			return e.rt.Direct(), nil
		case e.pool != nil && !fresh:
			return e.pool, nil
		}
		return e.rt, nil
	case "gvisor":
		gv, err := e.gvisor()
		if err != nil {
			return nil, fmt.Errorf("%w: isolation gvisor is not available on this server: %v", ErrIsolation, err)
		}
		if e.gvPool != nil && !fresh {
			return e.gvPool, nil
		}
		return gv, nil
	default:
		return nil, fmt.Errorf("%w: unknown isolation %q (known: %s)", ErrIsolation, isolation, knownIsolations())
	}
}
