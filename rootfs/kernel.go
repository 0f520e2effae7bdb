package rootfs

import (
	"embed"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Kernel is how a language keeps a live interpreter for a session (a
// kernel: see package oci's StartKernel): a driver program, shipped with
// sandcell (kernels/ in this package) and mounted read-only into the
// kernel's sandbox, that the language's interpreter runs. Adding a
// language's kernel is data: a driver that speaks the protocol (described
// in kernels/python.py) and this entry; the layers do not change.
type Kernel struct {
	// Driver are the driver's files in kernels/, the first the program
	// the interpreter runs (["python.py", "sandcell_inline.py"]).
	Driver []string `json:"driver"`
	// Argv runs the driver; "{driver}" stands for the path of its first
	// file inside the sandbox, e.g. ["/usr/bin/python3", "-B", "{driver}"].
	Argv []string `json:"argv"`
	// Env is added to the language's Env (a key given again replaces the
	// language's), e.g. the inline matplotlib backend.
	Env []string `json:"env,omitempty"`
}

// DriverPlaceholder stands for the driver's path in Kernel.Argv.
const DriverPlaceholder = "{driver}"

// kernelFiles are the drivers of the catalogue's kernels.
//
//go:embed kernels/*.py kernels/*.js
var kernelFiles embed.FS

// KernelDriver returns the files of the language's kernel driver, by name.
// The error wraps ErrNoKernel when the language has none.
func KernelDriver(l Language) (map[string][]byte, error) {
	if l.Kernel == nil {
		return nil, fmt.Errorf("%w: %s (kernels: %s)", ErrNoKernel, l.Name, strings.Join(KernelLanguages(), ", "))
	}
	files := make(map[string][]byte, len(l.Kernel.Driver))
	for _, name := range l.Kernel.Driver {
		b, err := kernelFiles.ReadFile("kernels/" + name)
		if err != nil {
			return nil, fmt.Errorf("kernel driver %s of %s: %w", name, l.Name, err)
		}
		files[name] = b
	}
	return files, nil
}

// KernelLanguages names the languages with a kernel, in catalogue order.
func KernelLanguages() []string {
	var names []string
	for _, l := range cat().Languages {
		if l.Kernel != nil {
			names = append(names, l.Name)
		}
	}
	return names
}

// check reports the first thing wrong with a kernel entry.
func (k *Kernel) check() error {
	switch {
	case len(k.Driver) == 0:
		return fmt.Errorf("kernel: no driver")
	case len(k.Argv) == 0 || !path.IsAbs(k.Argv[0]):
		return fmt.Errorf("kernel: argv must be an argv with an absolute program path")
	case !slices.Contains(k.Argv, DriverPlaceholder):
		return fmt.Errorf("kernel: argv does not run the driver (%s)", DriverPlaceholder)
	}
	for _, name := range k.Driver {
		if name != path.Base(name) || strings.HasPrefix(name, ".") {
			return fmt.Errorf("kernel: driver file %q must be a plain file name", name)
		}
		if _, err := kernelFiles.ReadFile("kernels/" + name); err != nil {
			return fmt.Errorf("kernel: driver file %q is not in kernels/", name)
		}
	}
	for _, e := range k.Env {
		if key, _, ok := strings.Cut(e, "="); !ok || key == "" {
			return fmt.Errorf("kernel: env %q is not KEY=value", e)
		}
	}
	return nil
}

func (k *Kernel) clone() *Kernel {
	if k == nil {
		return nil
	}
	return &Kernel{Driver: slices.Clone(k.Driver), Argv: slices.Clone(k.Argv), Env: slices.Clone(k.Env)}
}
