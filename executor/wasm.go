package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/wasm"
)

// Isolation wasm (package wasm): the program runs as a WebAssembly module
// in this process, which needs no kernel feature. A compiled language's
// compile phase (clang, rustc) is still a native program: it runs in a
// runc sandbox of the language's wasm variant's root, where the host
// allows one; where it does not (no user namespaces), the request is
// refused and says so, and only languages without a compile phase (ruby)
// run.

// wasmRuntime returns the wasm backend, made on first use: a runc server
// that never gets a wasm request makes no instance directory for it.
func (e *Executor) wasmRuntime() (*wasm.Runtime, error) {
	e.wasmOnce.Do(func() {
		uid, gid := -1, -1 // no kernel sandbox: this user owns everything
		if e.rt != nil {
			u, g := e.rt.SandboxIDs()
			uid, gid = int(u), int(g)
		}
		cache := e.opts.WasmCache
		if cache != "" {
			// Its machine code is run as it is: it must be ours alone.
			err := os.MkdirAll(filepath.Dir(cache), 0o755)
			if err == nil {
				err = ownStateDir(cache)
			}
			if err != nil {
				e.log.Warn("compiled wasm modules are kept in memory only", "cache_dir", cache, "why", err)
				cache = ""
			}
		}
		e.wasm, e.wasmErr = wasm.New(wasm.Config{StateDir: e.opts.StateDir, CacheDir: cache, UID: uid, GID: gid, Logger: e.log})
	})
	return e.wasm, e.wasmErr
}

// wasmPlan is how a wasm request runs: the language's wasm variant, the
// compile phase's runtime and root (runc; none without a compile phase)
// and the run phase's root (the variant's own layer, not mounted: the wasm
// runtime reads a module from it, nothing else).
type wasmPlan struct {
	lang        rootfs.Language
	compileRT   oci.Runtime
	compileRoot string
	runRoot     string
}

// planWasm decides a wasm request's plan, or refuses it.
func (e *Executor) planWasm(ctx context.Context, lang rootfs.Language, req Request) (wasmPlan, error) {
	if len(req.Dependencies) > 0 {
		return wasmPlan{}, fmt.Errorf("%w: isolation wasm installs no packages (a module has no network and no dependency layers)", ErrIsolation)
	}
	if req.Command != nil {
		// A module of the request's files: nothing of a layer is read.
		if !strings.HasPrefix(req.Command[0], "/work/") {
			return wasmPlan{}, fmt.Errorf("%w: under isolation wasm a command runs a module of /work (give it in files), not %q", ErrIsolation, req.Command[0])
		}
		return wasmPlan{lang: lang, runRoot: e.opts.StateDir}, nil
	}
	v, err := lang.WasmVariant()
	if err != nil {
		return wasmPlan{}, err
	}
	p := wasmPlan{lang: v}
	if v.Compiled() {
		if e.opts.NoKernelSandbox != "" {
			return wasmPlan{}, fmt.Errorf("%w: %s is compiled to WebAssembly by a native compiler, which runs in a runc sandbox, and this host cannot start one (%s); under wasm without a compile phase: %s",
				ErrIsolation, lang.Name, e.opts.NoKernelSandbox, strings.Join(interpretedWasm(), ", "))
		}
		if p.compileRT, err = e.runtime("runc", req.Fresh, req.Libcontainer); err != nil {
			return wasmPlan{}, err
		}
		if p.compileRoot, err = e.root(ctx, v, req.Output); err != nil {
			return wasmPlan{}, err
		}
	} else if e.opts.NoKernelSandbox == "" && e.opts.AutoBuild {
		if _, err := e.root(ctx, v, req.Output); err != nil { // builds the layer if missing
			return wasmPlan{}, err
		}
	}
	if p.runRoot, err = e.store.OwnLayer(v); err != nil {
		return wasmPlan{}, err
	}
	return p, nil
}

// interpretedWasm are the languages offered under wasm without a compile
// phase: what runs where no runc sandbox can be made.
func interpretedWasm() []string {
	var out []string
	for _, name := range rootfs.WasmLanguages() {
		if l, err := rootfs.Lookup(name); err == nil {
			if v, err := l.WasmVariant(); err == nil && !v.Compiled() {
				out = append(out, name)
			}
		}
	}
	return out
}

// openWasmOnly is Open on a host that gives this user no kernel sandbox
// (Options.NoKernelSandbox): only the wasm runtime, which needs none.
func openWasmOnly(e *Executor) (*Executor, error) {
	if err := ownStateDir(e.opts.StateDir); err != nil {
		return nil, err
	}
	if _, err := e.wasmRuntime(); err != nil {
		return nil, err
	}
	if n, err := e.wasm.Recover(); err != nil {
		e.log.Warn("start-up cleanup incomplete", "err", err)
	} else if n > 0 {
		e.log.Info("start-up cleanup", "removed", n)
	}
	e.log.Info("no kernel sandbox on this host: only isolation wasm runs", "why", e.opts.NoKernelSandbox)
	return e, nil
}

// noKernel is the refusal of runc and gVisor on such a host.
func (e *Executor) noKernel(isolation string) error {
	return fmt.Errorf("%w: isolation %s needs user namespaces, which this host refuses (%s); run with isolation wasm (languages: %s), or see `sandcell doctor` for the fix",
		ErrIsolation, isolation, e.opts.NoKernelSandbox, strings.Join(rootfs.WasmLanguages(), ", "))
}

// sandboxIDs of a host without a kernel sandbox: this process's own.
func ownIDs() (uint32, uint32) { return uint32(os.Getuid()), uint32(os.Getgid()) }
