package backend

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"

	"github.com/sandcell/sandcell/oci"
)

// kernelIdleBytes caps what a kernel's stream keeps between cells (a
// background thread printing): it is handed to the next cell, and dropped
// past this.
const kernelIdleBytes = 64 << 10

// kernelStream reads one output stream of a kernel (stdout or stderr) for
// as long as the kernel lives, and splits it into cells. After each cell
// the kernel's driver writes the cell's mark, a string the server chose
// for that cell, on the stream: what comes before it is the cell's output,
// what comes after belongs to the next one. The mark is an OSC sequence, so
// that a mark that arrives late (its cell was given up waiting for it) is
// removed from the text like any other escape sequence.
//
// The stream is the program's: it may print a mark itself (if it learnt
// it: only its own cell's result is cut short), never end a line, or flood.
// Memory stays bounded by the cell's cap and kernelIdleBytes; the pipe is
// always drained so the kernel never blocks writing.
type kernelStream struct {
	mu    sync.Mutex
	cell  *cellCapture // the running cell's; nil between cells
	idle  []byte       // output between cells, for the next cell
	carry []byte       // the end of the last read that may begin the mark
	eof   chan struct{}
}

// cellCapture is one cell's part of a stream.
type cellCapture struct {
	mark      []byte
	limit     int64
	buf       []byte
	truncated bool
	over      func() // called once when the output passes limit
	emit      func(text string)
	cleaner   oci.TextCleaner
	marked    chan struct{} // closed when the mark was read
	done      bool
}

func startKernelStream(r *os.File) *kernelStream {
	s := &kernelStream{eof: make(chan struct{})}
	go s.read(r)
	return s
}

func (s *kernelStream) read(r io.ReadCloser) {
	defer close(s.eof)
	defer r.Close()
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			s.feed(chunk[:n])
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				s.mu.Lock()
				if s.cell != nil {
					s.cell.truncated = true
				}
				s.mu.Unlock()
			}
			return
		}
	}
}

// feed takes what one read returned.
func (s *kernelStream) feed(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feedLocked(b)
}

func (s *kernelStream) feedLocked(b []byte) {
	for len(b) > 0 {
		c := s.cell
		if c == nil {
			s.keepIdle(b)
			return
		}
		data := b
		if len(s.carry) > 0 {
			data = append(s.carry, b...)
			s.carry = nil
		}
		if i := bytes.Index(data, c.mark); i >= 0 {
			c.keep(data[:i])
			c.finish()
			s.cell = nil
			b = data[i+len(c.mark):]
			continue
		}
		// Hold back a tail that may be the start of the mark.
		k := markPrefix(data, c.mark)
		c.keep(data[:len(data)-k])
		if k > 0 {
			s.carry = append([]byte(nil), data[len(data)-k:]...)
		}
		return
	}
}

// markPrefix is the length of the longest end of data that is a proper
// prefix of mark.
func markPrefix(data, mark []byte) int {
	for k := min(len(mark)-1, len(data)); k > 0; k-- {
		if bytes.Equal(data[len(data)-k:], mark[:k]) {
			return k
		}
	}
	return 0
}

func (s *kernelStream) keepIdle(b []byte) {
	room := kernelIdleBytes - len(s.idle)
	if room <= 0 {
		return
	}
	if len(b) > room {
		b = b[:room]
	}
	s.idle = append(s.idle, b...)
}

// begin starts a cell: output up to its mark is the cell's. What came
// between cells is its first output.
func (s *kernelStream) begin(mark []byte, limit int64, over func(), emit func(string)) *cellCapture {
	c := &cellCapture{mark: mark, limit: limit, over: over, emit: emit, marked: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cell = c
	idle := s.idle
	s.idle = nil
	s.feedLocked(idle)
	return c
}

// end ends the cell c (its mark came, or will not): what is held back is
// its output, and what comes from now on is the next cell's.
func (s *kernelStream) end(c *cellCapture) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cell == c {
		c.keep(s.carry)
		s.carry = nil
		s.cell = nil
	}
	c.finish()
}

// keep stores output within the cap, passing it on live.
func (c *cellCapture) keep(b []byte) {
	if len(b) == 0 || c.done {
		return
	}
	if room := c.limit - int64(len(c.buf)); int64(len(b)) > room {
		if room > 0 {
			c.keep(b[:room])
		}
		if !c.truncated {
			c.truncated = true
			if c.over != nil {
				c.over()
			}
		}
		return
	}
	c.buf = append(c.buf, b...)
	if c.emit != nil {
		if t := c.cleaner.Write(b); t != "" {
			c.emit(t)
		}
	}
}

// finish ends the cell's live output and says its mark came (or will
// not). Called with the stream's lock held, once or more.
func (c *cellCapture) finish() {
	if c.done {
		return
	}
	c.done = true
	if c.emit != nil {
		if t := c.cleaner.Flush(); t != "" {
			c.emit(t)
		}
		c.emit = nil
	}
	close(c.marked)
}

// text is the cell's output as the result shows it, cleaned. Call it after
// end.
func (c *cellCapture) text() string { return oci.CleanText(c.buf) }
