package executor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/oci"
)

// carryBytes bounds what FetchWork hands from a compile phase to the run
// phase; the compile phase's /work tmpfs is the tighter bound in practice.
const carryBytes = 1 << 30

// FetchWork is the Workspace (Request.Workspace) of a one-shot run whose
// caller wants files of its /work back once the program ended
// (SandboxFusion's fetch_files): without a workspace a one-shot run's
// /work is thrown away. For a compiled language it hands the compile
// phase's /work on to the run phase, as Collect does for a run without a
// workspace; after every phase it reads the files named in Want (the last
// phase's reading wins), each a regular file, at most MaxBytes together.
// A file missing, not regular or past the budget is left out and its
// reason is in Skipped: the run itself is not failed for it.
//
// The /work it reads was written by the program, which may plant
// symlinks to host files, FIFOs or growing files there. Files are opened
// through an os.Root, the last component with O_NOFOLLOW (no link out of
// /work is followed: CVE-2024-28185, Judge0 read and wrote through a
// symlink its sandbox planted), with O_NONBLOCK (a FIFO cannot block the
// server) and read only if fstat on the open file says regular; bytes are
// counted as they are read, never trusted from a stat.
type FetchWork struct {
	// Phases is the number of phases of the run (2: a compiled language).
	Phases int
	// Want are the paths to fetch, relative to /work and cleaned.
	Want []string
	// MaxBytes bounds the fetched files together.
	MaxBytes int64

	mu      sync.Mutex
	saves   int
	carry   []api.File
	fetched map[string][]byte
	skipped []string
}

// Fill writes the compile phase's /work into the run phase's, owned by
// dir's owner (the sandbox user).
func (w *FetchWork) Fill(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.carry) == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("stat /work: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open /work: %w", err)
	}
	defer root.Close()
	for _, f := range w.carry {
		if err := oci.WriteFile(root, f, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	w.carry = nil // written: the run phase's /work holds them now
	return nil
}

// Save reads the wanted files of dir, the /work of a phase that ended,
// and, before the last phase, keeps all of it for the next one.
func (w *FetchWork) Save(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.saves++
	w.fetch(dir)
	if w.saves < w.Phases {
		files, err := oci.Collect(dir, carryBytes)
		if err != nil {
			return fmt.Errorf("%w: handing the compiled files to the run: %w", ErrWorkRefused, err)
		}
		w.carry = files
	}
	return nil
}

// fetch reads the wanted files of dir (see FetchWork).
func (w *FetchWork) fetch(dir string) {
	w.fetched, w.skipped = map[string][]byte{}, nil
	root, err := os.OpenRoot(dir)
	if err != nil {
		w.skipped = append(w.skipped, fmt.Sprintf("/work: %v", err))
		return
	}
	defer root.Close()
	left := w.MaxBytes
	for _, p := range w.Want {
		data, err := readRegular(root, p, left)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // SandboxFusion leaves a missing file out, silently
		case err != nil:
			w.skipped = append(w.skipped, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		w.fetched[p] = data
		left -= int64(len(data))
	}
}

// readRegular reads the regular file p of root, at most limit bytes.
func readRegular(root *os.Root, p string, limit int64) ([]byte, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, errors.New("a symbolic link, not fetched")
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s), not fetched", fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("past the %d bytes left of the fetch budget, not fetched", limit)
	}
	return data, nil
}

// Fetched are the files read after the last phase, by path.
func (w *FetchWork) Fetched() map[string][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fetched
}

// Skipped says why wanted files that exist were not fetched.
func (w *FetchWork) Skipped() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.skipped
}
