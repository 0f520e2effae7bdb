package oci

import (
	"slices"

	"github.com/sandcell/sandcell/api"
)

// What a backend outside this package (the wasm runtime, which runs a
// module in this process and so mounts nothing) shares with runc and
// gVisor runs, so that a request means the same whatever runs it: the
// program's environment, how /work is filled and read back, and (in
// output.go and verdict.go) the output caps and the verdict.

// Env is the whole environment of the request's program: the base
// allowlist (PATH, HOME=/work, LANG, TERM=dumb), then the request's own.
func Env(req *Request) []string {
	return append(slices.Clone(baseEnv), req.Env...)
}

// FillWork fills the run's empty /work directory work: the request's
// workspace (Workspace.Fill), then its Files, written through an os.Root
// with new entries owned by uid and gid.
func FillWork(work string, req *Request, uid, gid uint32) error {
	return fillWork(work, req, uid, gid)
}

// Collect reads the regular files of a finished run's /work (a compile
// phase's outputs, see Request.Collect), at most limit bytes together,
// following no link.
func Collect(work string, limit int64) ([]api.File, error) {
	return collect(work, limit)
}
