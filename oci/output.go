package oci

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// capture reads one of the program's streams, keeping at most limit bytes.
// Server memory stays bounded whatever the program writes: past the limit the
// bytes are read and dropped, and over is called once so that the run is
// killed (like Piston and Judge0 do); draining continues until the pipe
// closes so the writer never blocks on a full pipe before it dies.
//
// With an emit function, what is kept is also cleaned as it comes (a
// TextCleaner per stream) and handed to emit, from the capture's goroutine,
// until the stream ends or mute is called.
type capture struct {
	limit     int64
	over      func()
	buf       []byte
	truncated bool
	done      chan struct{}

	mu      sync.Mutex
	emit    func(text string) // nil: no live output, or muted
	cleaner TextCleaner
}

func startCapture(r *os.File, limit int64, over func(), emit func(string)) *capture {
	c := &capture{limit: limit, over: over, emit: emit, done: make(chan struct{})}
	go c.drain(r)
	return c
}

func (c *capture) drain(r *os.File) {
	// The last live output is handed over before done is closed: once
	// wait returned, emit is never called again.
	defer close(c.done)
	defer r.Close()
	defer c.flush()
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			room := c.limit - int64(len(c.buf))
			switch {
			case int64(n) <= room:
				c.keep(chunk[:n])
			default:
				if room > 0 {
					c.keep(chunk[:room])
				}
				if !c.truncated {
					c.truncated = true
					c.over()
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				c.truncated = true // the stream broke: what we have may be partial
			}
			return
		}
	}
}

// keep stores output within the cap and passes it on live.
func (c *capture) keep(b []byte) {
	c.buf = append(c.buf, b...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.emit != nil {
		if s := c.cleaner.Write(b); s != "" {
			c.emit(s)
		}
	}
}

// flush passes on the end of the live output (see TextCleaner.Flush).
func (c *capture) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.emit != nil {
		if s := c.cleaner.Flush(); s != "" {
			c.emit(s)
		}
		c.emit = nil
	}
}

// mute stops the live output: when it returns, emit is not running and is
// never called again. For the paths where Wait returns while the stream is
// still open (a container that would not die).
func (c *capture) mute() {
	c.mu.Lock()
	c.emit = nil
	c.mu.Unlock()
}

// wait returns the captured bytes once the stream has closed.
func (c *capture) wait() ([]byte, bool) {
	<-c.done
	return c.buf, c.truncated
}

// text is the captured output as the result shows it: cleaned (see
// TextCleaner), and marked when the stream was cut at the cap. Call it
// after wait.
func (c *capture) text() string {
	s := CleanText(c.buf)
	if c.truncated {
		s += fmt.Sprintf("\n[sandcell: output truncated at %d bytes]", c.limit)
	}
	return s
}
