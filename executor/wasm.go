package executor

import (
	"context"
	"fmt"
	"strings"

	"github.com/sandcell/sandcell/rootfs"
)

// Isolation wasm (package wasm): the program runs as a WebAssembly module
// in this process, which needs no kernel feature. A compiled language's
// compile phase (clang, rustc) is still a native program: it runs in a
// runc sandbox of the language's wasm variant's root, where the host
// allows one; where it does not (no user namespaces), the request is
// refused and says so, and only languages without a compile phase (ruby)
// run. The run phase's root is the variant's own layer, not mounted: the
// wasm runtime reads a module from it, nothing else.

// wasmLanguage is the language a wasm request runs as (its wasm variant;
// a command's language as it is: a module of the request's files, nothing
// of a layer is read), or the refusal.
func (e *Executor) wasmLanguage(lang rootfs.Language, req Request) (rootfs.Language, error) {
	if len(req.Dependencies) > 0 {
		return lang, fmt.Errorf("%w: isolation wasm installs no packages (a module has no network and no dependency layers)", ErrIsolation)
	}
	if req.Command != nil {
		if !strings.HasPrefix(req.Command[0], "/work/") {
			return lang, fmt.Errorf("%w: under isolation wasm a command runs a module of /work (give it in files), not %q", ErrIsolation, req.Command[0])
		}
		return lang, nil
	}
	v, err := lang.WasmVariant()
	if err != nil {
		return lang, err
	}
	if v.Compiled() && e.opts.NoKernelSandbox != "" {
		return lang, fmt.Errorf("%w: %s is compiled to WebAssembly by a native compiler, which runs in a runc sandbox, and this host cannot start one (%s); under wasm without a compile phase: %s",
			ErrIsolation, lang.Name, e.opts.NoKernelSandbox, strings.Join(interpretedWasm(), ", "))
	}
	return v, nil
}

// wasmRoots are a wasm plan's roots, and its compile phase's runtime:
// runc, in the variant's root.
func (e *Executor) wasmRoots(ctx context.Context, p *Plan, req Request) error {
	if req.Command != nil {
		p.Run.Root = e.opts.StateDir // a root the module never reads
		return nil
	}
	v := p.Language
	var err error
	switch {
	case p.Compile != nil:
		if p.Compile.Runtime, err = e.runtime("runc", req.Fresh, req.Libcontainer); err != nil {
			return err
		}
		if p.Compile.Root, err = e.root(ctx, v, req.Output); err != nil {
			return err
		}
	case e.opts.NoKernelSandbox == "" && e.opts.AutoBuild:
		if _, err := e.root(ctx, v, req.Output); err != nil { // builds the layer if missing
			return err
		}
	}
	p.Run.Root, err = e.store.OwnLayer(v)
	return err
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

// noKernel is the refusal of runc and gVisor on a host without a kernel
// sandbox.
func (e *Executor) noKernel(isolation string) error {
	return fmt.Errorf("%w: isolation %s needs user namespaces, which this host refuses (%s); run with isolation wasm (languages: %s), or see `sandcell doctor` for the fix",
		ErrIsolation, isolation, e.opts.NoKernelSandbox, strings.Join(rootfs.WasmLanguages(), ", "))
}
