package limits

import "log/slog"

// ParentSpec names an existing parent for another process: a helper that
// outlives its server (the instance's reaper, oci/backend) removes the
// server's cgroups through it. It holds no limit: Reopen sets nothing.
type ParentSpec struct {
	Root      string `json:"root"`
	Path      string `json:"path"`
	Mode      Mode   `json:"mode"`
	Delegated bool   `json:"delegated,omitempty"`
}

// Spec is what Reopen needs to name p in another process.
func (p *Parent) Spec() ParentSpec {
	return ParentSpec{Root: p.root, Path: p.path, Mode: p.mode, Delegated: p.delegated}
}

// Reopen is the parent s names, as EnsureParent or OpenDelegated made it
// in the process that wrote s; it creates and sets nothing.
func Reopen(s ParentSpec, log *slog.Logger) *Parent {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Parent{root: s.Root, path: s.Path, mode: s.Mode, log: log, ops: defaultOps(), delegated: s.Delegated}
}
