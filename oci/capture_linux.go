package oci

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// StartCaptures reads a program's stdout and stderr pipes into two
// Captures (limit, over as for NewOutput; emitOut and emitErr may be nil)
// from one goroutine, in the order the pipes became readable: one epoll
// set, whose ready list is first come first served, and one read of at
// most 64 KiB per readiness. So the live output of both streams (Piston's
// "output", Judge0's redirect_stderr_to_stdout) is handed on in the order
// it was written whenever the reader keeps up with the writer, as a
// single event loop over the two pipes reads them (Piston's job.js); two
// goroutines, one per pipe, raced for the order of every pair of writes
// close in time. Writes that land in both pipes before the reader wakes
// can still come out of order: two pipes keep no order between them.
func StartCaptures(stdout, stderr *os.File, limit int64, over func(), emitOut, emitErr func(string)) (*Capture, *Capture) {
	out := &Capture{Output: NewOutput(limit, over, emitOut), done: make(chan struct{})}
	errc := &Capture{Output: NewOutput(limit, over, emitErr), done: make(chan struct{})}
	streams := []captureStream{{f: stdout, c: out, fd: -1}, {f: stderr, c: errc, fd: -1}}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	for i := range streams {
		s := &streams[i]
		if err == nil {
			err = rawFd(s.f, &s.fd)
		}
		if err == nil {
			err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, s.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)})
		}
	}
	if err != nil { // no epoll: one goroutine per pipe, as before
		if ep >= 0 {
			unix.Close(ep)
		}
		go out.drain(stdout)
		go errc.drain(stderr)
		return out, errc
	}
	go readCaptures(ep, streams)
	return out, errc
}

// rawFd is f's descriptor, its mode left as it is (File.Fd would make
// it blocking); it stays valid until f is closed.
func rawFd(f *os.File, fd *int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(u uintptr) { *fd = int(u) })
}

// captureStream is one pipe of StartCaptures.
type captureStream struct {
	f    *os.File
	fd   int
	c    *Capture
	done bool
}

// readCaptures is StartCaptures' reader: it ends when both pipes are
// closed (EOF) or broken. Each Capture's last live output is handed over
// before its done is closed, as drain does.
func readCaptures(ep int, streams []captureStream) {
	defer unix.Close(ep)
	chunk := make([]byte, 64<<10)
	events := make([]unix.EpollEvent, len(streams))
	open := len(streams)
	for open > 0 {
		n, err := unix.EpollWait(ep, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // cannot happen with a valid set; end as a broken stream
			for i := range streams {
				if !streams[i].done {
					streams[i].c.truncated = true
					streams[i].end(ep)
				}
			}
			return
		}
		for _, ev := range events[:n] {
			s := &streams[ev.Fd]
			if s.done {
				continue
			}
			r, err := unix.Read(s.fd, chunk)
			if r > 0 {
				s.c.Write(chunk[:r])
				continue
			}
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				s.c.truncated = true // the stream broke: what we have may be partial
			}
			s.end(ep)
			open--
		}
	}
}

// end closes a stream that reached EOF or broke.
func (s *captureStream) end(ep int) {
	s.done = true
	unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, s.fd, nil)
	s.c.Flush()
	s.f.Close()
	close(s.c.done)
}
