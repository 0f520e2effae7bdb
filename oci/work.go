package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
)

// What every backend shares (runc and gVisor in oci/backend; the wasm
// runtime, which runs a module in this process and so mounts nothing), so
// that a request means the same whatever runs it: the program's
// environment, how /work is filled and read back, and (in output.go and
// verdict.go) the output caps and the verdict.

// Env is the whole environment of the request's program: the base
// allowlist (PATH, HOME=/work, LANG, TERM=dumb), then the request's own.
func Env(req *Request) []string {
	return append(slices.Clone(baseEnv), req.Env...)
}

// FillWork fills the run's empty /work directory work: the request's
// workspace (Workspace.Fill), then its Files, written through an os.Root
// with new entries owned by uid and gid.
func FillWork(work string, req *Request, uid, gid uint32) error {
	if req.Workspace != nil {
		if err := req.Workspace.Fill(work); err != nil {
			return fmt.Errorf("%w: filling /work from the session: %w", ErrRuntime, err)
		}
	}
	if len(req.Files) == 0 {
		return nil
	}
	// os.Root refuses paths that leave the directory, symlinks included;
	// nothing else can write here now (no program of this run has started;
	// what an earlier run of the session left is filled in, inert).
	root, err := os.OpenRoot(work)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	defer root.Close()
	for _, f := range req.Files {
		if err := WriteFile(root, f, int(uid), int(gid)); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes f into /work through root, owned by uid and gid,
// replacing whatever was at its path and following no link.
func WriteFile(root *os.Root, f api.File, uid, gid int) error {
	if dir := filepath.Dir(f.Path); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%w: create directory for %q: %w", ErrInvalidRequest, f.Path, err)
		}
		// Directories created here belong to the sandbox user too.
		for d := dir; d != "."; d = filepath.Dir(d) {
			if err := root.Lchown(d, uid, gid); err != nil {
				return fmt.Errorf("%w: %w", ErrRuntime, err)
			}
		}
	}
	// A File replaces what a workspace filled in at its path. The entry
	// is removed, never opened: an earlier run of the session may have
	// planted a symlink there, and a write through it would land wherever
	// it points (CVE-2024-28185: Judge0 followed a symlink its sandbox
	// planted). os.Root's Remove does not follow a final symlink, and
	// O_EXCL creates a new file or fails, never opening a link.
	if err := root.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: file %q: /work has a non-empty directory there", ErrInvalidRequest, f.Path)
		}
		return fmt.Errorf("%w: replace %q: %w", ErrRuntime, f.Path, err)
	}
	mode := f.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	fh, err := root.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("%w: write %q: %w", ErrInvalidRequest, f.Path, err)
	}
	_, werr := fh.Write(f.Data)
	cerr := fh.Chown(uid, gid)
	if err := errors.Join(werr, cerr, fh.Close()); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("%w: %q does not fit in /work: %w", ErrInvalidRequest, f.Path, err)
		}
		return fmt.Errorf("%w: write %q: %w", ErrRuntime, f.Path, err)
	}
	return nil
}
