package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// The files of sandboxes that ended without a kill.
//
// A sandbox that ends because its server stopped (or was killed) or its
// init died keeps its files (Dir/<id>: the upper layer's disk image and
// sandbox.json) so that a later CreateSandbox re-creates it on them. Kept
// for ever, they were a cost no sandbox paid: every restart of a server
// with sandboxes left up to --max-sandboxes disk images behind. So kept
// files live at most KeepFiles after their sandbox ended (sandbox.json's
// modification time, set when it ended), and at most Max of them are
// kept, the oldest removed first. The sweep runs when the options are set
// (a server's start: what a crash left is found then) and every
// sweepEvery.
//
// Several servers may share Dir (one layer directory, several instances):
// each running sandbox holds an exclusive flock on its Dir/<id>/lock for
// its life (released by the kernel when its server dies, even by -9). The
// sweep removes nothing it cannot lock, and a re-create that cannot lock
// the files is refused: another server runs that sandbox.

const (
	// DefaultKeepFiles is how long an ended sandbox's files are kept.
	DefaultKeepFiles = 7 * 24 * time.Hour
	// sweepEvery is how often kept files are swept.
	sweepEvery = time.Hour
	lockFile   = "lock"
	recordFile = "sandbox.json"
)

// lockFiles takes the sandbox's lock in dir; busy says another server
// holds it.
func lockFiles(dir string) (f *os.File, busy bool, err error) {
	f, err = os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, err
	}
	// Locked, but maybe a file a sweep has removed since we opened it
	// (it locked, removed the directory and let go): that lock guards
	// nothing. Only the file still at its path counts.
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		f.Close()
		return nil, false, err
	}
	if err := unix.Lstat(f.Name(), &now); err != nil || now.Ino != held.Ino || now.Dev != held.Dev {
		f.Close()
		return nil, false, fmt.Errorf("%s: removed while it was locked: %w", f.Name(), os.ErrNotExist)
	}
	return f, false, nil
}

// makeAndLock makes a sandbox's directory and takes its lock, stamped
// with now (the files' age counts from it until the record is written).
// A sweep may remove the directory between the two (it was old and
// unlocked: a re-create's files): then it is made once more.
func makeAndLock(dir string, now time.Time) (f *os.File, busy bool, err error) {
	for range 3 {
		if err = os.MkdirAll(dir, 0o700); err != nil {
			return nil, false, err
		}
		if f, busy, err = lockFiles(dir); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if f != nil {
		_ = os.Chtimes(f.Name(), now, now)
	}
	return f, busy, err
}

// keptAt is when a sandbox's kept files were last used: its record's
// modification time (written at create, touched when it ended), else its
// lock's (a create that failed before the record), else the directory's.
func keptAt(dir string) time.Time {
	for _, p := range []string{filepath.Join(dir, recordFile), filepath.Join(dir, lockFile), dir} {
		if st, err := os.Lstat(p); err == nil {
			return st.ModTime()
		}
	}
	return time.Time{}
}

// sweepKept removes the kept files that are too old or too many, and
// returns how many sandboxes' files it removed.
func (l *Live) sweepKept() (int, error) {
	opts := l.options()
	dir := l.dirOf(opts)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sweep kept sandbox files: %w", err)
	}
	type kept struct {
		id string
		at time.Time
	}
	var all []kept
	l.mu.Lock()
	for _, e := range ents {
		// Only what has a sandbox id's shape: nothing else in Dir is ours
		// to remove.
		if e.IsDir() && validID(e.Name()) && l.table[e.Name()] == nil {
			all = append(all, kept{e.Name(), keptAt(filepath.Join(dir, e.Name()))})
		}
	}
	l.mu.Unlock()
	slices.SortFunc(all, func(a, b kept) int { return b.at.Compare(a.at) }) // newest first
	now := l.clock.Now()
	removed, left := 0, 0
	var errs []error
	for _, k := range all {
		if now.Sub(k.at) <= opts.KeepFiles && left < opts.Max {
			left++
			continue
		}
		p := filepath.Join(dir, k.id)
		lock, busy, err := lockFiles(p)
		if busy || err != nil {
			continue // another server's running sandbox, or not ours to open
		}
		// Locked: no server runs a sandbox on these files, and none can
		// start one on them until they are gone.
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove kept files of sandbox %s: %w", k.id, err))
		} else {
			removed++
			l.s.log.Info("kept files of an ended sandbox removed", "sandbox", k.id, "ended", k.at, "keep", opts.KeepFiles)
		}
		lock.Close()
	}
	return removed, errors.Join(errs...)
}

// sweepLoop sweeps now and every sweepEvery until the Live is closed.
func (l *Live) sweepLoop(stop <-chan struct{}) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		if _, err := l.sweepKept(); err != nil {
			l.s.log.Warn("kept sandbox files not swept", "err", err)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
