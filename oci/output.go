package oci

import (
	"errors"
	"io"
	"os"
)

// capture reads one of the program's streams, keeping at most limit bytes.
// Server memory stays bounded whatever the program writes: past the limit the
// bytes are read and dropped, and over is called once so that the run is
// killed (like Piston and Judge0 do); draining continues until the pipe
// closes so the writer never blocks on a full pipe before it dies.
type capture struct {
	limit     int64
	over      func()
	buf       []byte
	truncated bool
	done      chan struct{}
}

func startCapture(r *os.File, limit int64, over func()) *capture {
	c := &capture{limit: limit, over: over, done: make(chan struct{})}
	go c.drain(r)
	return c
}

func (c *capture) drain(r *os.File) {
	defer close(c.done)
	defer r.Close()
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			room := c.limit - int64(len(c.buf))
			switch {
			case int64(n) <= room:
				c.buf = append(c.buf, chunk[:n]...)
			default:
				if room > 0 {
					c.buf = append(c.buf, chunk[:room]...)
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

// wait returns the captured bytes once the stream has closed.
func (c *capture) wait() ([]byte, bool) {
	<-c.done
	return c.buf, c.truncated
}
