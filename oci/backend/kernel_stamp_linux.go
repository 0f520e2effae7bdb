package backend

import (
	"errors"
	"hash/maphash"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of a stamp walk: a /work bigger or deeper than this is always
// saved (the workspace's Save then applies the session's own caps).
const (
	maxStampEntries = 200000
	maxStampDepth   = 512
	// stampRecent: an entry changed this recently may change again
	// within the same tick of the kernel's coarse file clock without its
	// times moving, so a stamp that holds one is not trusted.
	stampRecent = 50 * time.Millisecond
)

var stampSeed = maphash.MakeSeed()

// workStamp sums what a kernel's /work looks like: every entry's path,
// inode, type, mode, size, mtime and ctime. A program can set mtime but
// not ctime, so any change of an entry (content, metadata, a rename)
// changes the stamp. The zero value is invalid and equals no stamp of a
// walk that succeeded.
type workStamp struct {
	sum   uint64
	valid bool
}

// stampWork walks dir without following a link (the kernel may be changing
// it: a walk that goes wrong is an invalid stamp, and /work is saved).
func stampWork(dir string) (workStamp, bool) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return workStamp{}, false
	}
	w := stampWalker{recent: time.Now().Add(-stampRecent).UnixNano()}
	w.h.SetSeed(stampSeed)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		unix.Close(fd)
		return workStamp{}, false
	}
	w.entry("", &st)
	ok := w.dir(fd, 0) && !w.fresh
	if !ok {
		return workStamp{}, false
	}
	return workStamp{sum: w.h.Sum64(), valid: true}, true
}

type stampWalker struct {
	h       maphash.Hash
	entries int
	recent  int64
	fresh   bool
}

func (w *stampWalker) entry(name string, st *unix.Stat_t) {
	var b [8 * 7]byte
	for i, v := range []uint64{st.Ino, uint64(st.Mode), uint64(st.Size), uint64(st.Mtim.Nano()), uint64(st.Ctim.Nano()), uint64(st.Nlink), uint64(st.Uid)} {
		for j := range 8 {
			b[i*8+j] = byte(v >> (8 * j))
		}
	}
	w.h.WriteString(name)
	w.h.WriteByte(0)
	w.h.Write(b[:])
	if st.Ctim.Nano() >= w.recent {
		w.fresh = true
	}
}

// dir stamps the entries of the open directory fd (closed here).
func (w *stampWalker) dir(fd, depth int) bool {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	if depth > maxStampDepth {
		return false
	}
	w.h.WriteByte(1) // entering a directory
	for {
		names, err := f.Readdirnames(1024)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false
		}
		for _, name := range names {
			if w.entries++; w.entries > maxStampEntries {
				return false
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				return false
			}
			w.entry(name, &st)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil || !w.dir(sub, depth+1) {
					return false
				}
			}
		}
	}
	w.h.WriteByte(2) // leaving it
	return true
}
