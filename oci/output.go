package oci

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Output is one stream of a run as sandcell keeps it: at most limit bytes.
// Server memory stays bounded whatever the program writes: past the limit
// the bytes are dropped, and over is called once so that the run is killed
// (like Piston and Judge0 do). With an emit function, what is kept is also
// cleaned as it comes (a TextCleaner) and handed to emit, until Flush or
// Mute.
//
// Every backend's streams go through it: capture feeds it from a pipe
// (runc, gVisor), the wasm backend writes the module's fd 1 and 2 into it
// directly. Write is called from one goroutine at a time; Text and
// Truncated after the last Write.
type Output struct {
	limit     int64
	over      func()
	buf       []byte
	truncated bool

	mu      sync.Mutex
	emit    func(text string) // nil: no live output, or muted
	cleaner TextCleaner
}

// NewOutput is an empty stream capped at limit bytes; over (required) is
// called once, when the cap is passed; emit may be nil.
func NewOutput(limit int64, over func(), emit func(string)) *Output {
	return &Output{limit: limit, over: over, emit: emit}
}

// Write keeps what fits under the cap and drops the rest. It never fails:
// a writer past the cap is stopped by over, not by an error it could
// ignore and retry.
func (o *Output) Write(p []byte) (int, error) {
	room := o.limit - int64(len(o.buf))
	switch {
	case int64(len(p)) <= room:
		o.keep(p)
	default:
		if room > 0 {
			o.keep(p[:room])
		}
		if !o.truncated {
			o.truncated = true
			o.over()
		}
	}
	return len(p), nil
}

// keep stores output within the cap and passes it on live.
func (o *Output) keep(b []byte) {
	o.buf = append(o.buf, b...)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.emit != nil {
		if s := o.cleaner.Write(b); s != "" {
			o.emit(s)
		}
	}
}

// Flush ends the stream: it passes on the end of the live output (see
// TextCleaner.Flush); nothing is emitted after it.
func (o *Output) Flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.emit != nil {
		if s := o.cleaner.Flush(); s != "" {
			o.emit(s)
		}
		o.emit = nil
	}
}

// Mute stops the live output: when it returns, emit is not running and is
// never called again. For the paths where Wait returns while the stream is
// still open (a container that would not die).
func (o *Output) Mute() {
	o.mu.Lock()
	o.emit = nil
	o.mu.Unlock()
}

// Truncated reports whether the stream passed its cap (or broke).
func (o *Output) Truncated() bool { return o.truncated }

// Bytes is the kept output as the program wrote it (api.Phase's
// StdoutBytes): not cleaned, not marked. Read only.
func (o *Output) Bytes() []byte { return o.buf[:len(o.buf):len(o.buf)] }

// Text is the kept output as the result shows it: cleaned (see
// TextCleaner), and marked when the stream was cut at the cap.
func (o *Output) Text() string {
	s := CleanText(o.buf)
	if o.truncated {
		s += fmt.Sprintf("\n[sandcell: output truncated at %d bytes]", o.limit)
	}
	return s
}

// Capture reads one of the program's streams from a pipe into an Output;
// draining continues past the cap until the pipe closes, so the writer
// never blocks on a full pipe before it dies.
type Capture struct {
	*Output
	done chan struct{}
}

// StartCapture starts reading the pipe r into a Capture of limit bytes
// (over and emit as for NewOutput).
func StartCapture(r *os.File, limit int64, over func(), emit func(string)) *Capture {
	c := &Capture{Output: NewOutput(limit, over, emit), done: make(chan struct{})}
	go c.drain(r)
	return c
}

func (c *Capture) drain(r *os.File) {
	// The last live output is handed over before done is closed: once
	// wait returned, emit is never called again.
	defer close(c.done)
	defer r.Close()
	defer c.Flush()
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			c.Write(chunk[:n])
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				c.truncated = true // the stream broke: what we have may be partial
			}
			return
		}
	}
}

// Wait returns the captured bytes once the stream has closed.
func (c *Capture) Wait() ([]byte, bool) {
	<-c.done
	return c.buf, c.truncated
}
