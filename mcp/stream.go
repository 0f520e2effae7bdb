package mcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ServeStream serves one session over newline-delimited JSON: stdio (the
// default transport of `sandcell serve`) and each TCP connection. One
// message per line; stdout carries protocol messages only.
//
// The reader keeps reading while tools run, so cancellations and answers to
// server-to-client requests arrive meanwhile. At end of input the requests
// in flight run to completion and are answered (`echo REQUEST | sandcell
// serve` works); then ServeStream returns nil. When ctx is cancelled
// (SIGTERM) every request in flight is cancelled, which kills its sandbox,
// and ServeStream returns once their handlers have returned.
func (s *Server) ServeStream(ctx context.Context, r io.Reader, w io.Writer) error {
	return s.serveStream(ctx, "stdio", r, w)
}

func (s *Server) serveStream(ctx context.Context, transport string, r io.Reader, w io.Writer) error {
	lw := &lineWriter{w: w}
	ss := s.newSession(ctx, transport, lw.write)
	lw.onError = ss.cancel
	defer ss.close()

	lines := make(chan streamLine)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, tooLong, id, err := readLine(br, s.opts.MaxMessageBytes)
			select {
			case lines <- streamLine{line, tooLong, id, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	rep := streamReplier{lw}
	for {
		var l streamLine
		select {
		case <-ss.ctx.Done():
			return ctx.Err()
		case l = <-lines:
		}
		switch {
		case l.tooLong:
			ss.log.Warn("message too large", "limit", s.opts.MaxMessageBytes)
			lw.write(encodeError(l.id, tooLarge(s.opts.MaxMessageBytes)))
		case len(bytes.TrimSpace(l.data)) > 0:
			m, derr := decode(l.data)
			switch {
			case derr != nil:
				lw.write(encodeError(derr.ID, derr.Err))
			case m != nil:
				ss.receive(m, rep)
			}
		}
		if l.err != nil {
			if !errors.Is(l.err, io.EOF) && ctx.Err() == nil {
				ss.log.Info("stream read failed", "err", l.err)
			}
			// End of input: let the requests in flight finish and answer.
			done := make(chan struct{})
			go func() { ss.running.Wait(); close(done) }()
			select {
			case <-done:
				return nil
			case <-ss.ctx.Done():
				return ctx.Err()
			}
		}
	}
}

func tooLarge(limit int) *Error {
	return errorf(CodeInvalidRequest, "message too large: more than %d bytes (the limit); send smaller messages", limit)
}

type streamLine struct {
	data    []byte
	tooLong bool
	id      ID // of a line too long, if it could be read
	err     error
}

// readLine reads one line of at most max bytes. A longer line is read to
// its end and discarded (tooLong), so the stream stays in sync; its id is
// read as it goes past (idScanner), for the error.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, id ID, err error) {
	var sc idScanner
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case tooLong:
			sc.Write(chunk)
		case len(line)+len(chunk) > max+1: // +1: the newline
			sc.Write(line)
			sc.Write(chunk)
			tooLong, line = true, nil
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, tooLong, sc.ID(), err
	}
}

// lineWriter writes one message per line; safe for concurrent use. After a
// write error (the client went away) it calls onError and drops the rest.
type lineWriter struct {
	mu      sync.Mutex
	w       io.Writer
	broken  bool
	onError func()
}

func (lw *lineWriter) write(msg []byte) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.broken {
		return io.ErrClosedPipe
	}
	buf := make([]byte, 0, len(msg)+1)
	buf = append(append(buf, msg...), '\n')
	if _, err := lw.w.Write(buf); err != nil {
		lw.broken = true
		if lw.onError != nil {
			go lw.onError()
		}
		return err
	}
	return nil
}

type streamReplier struct{ lw *lineWriter }

func (r streamReplier) send(msg []byte) error { return r.lw.write(msg) }
func (r streamReplier) finish(msg []byte) {
	if msg != nil {
		_ = r.lw.write(msg)
	}
}

// ServeTCP serves raw newline-delimited JSON on every connection that ln
// accepts, one session per connection (the stdio code path). It returns
// when ctx is cancelled, after every connection's requests have ended.
func (s *Server) ServeTCP(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("tcp accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, conn)
		}()
	}
}

func (s *Server) serveConn(ctx context.Context, conn net.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	s.log.Debug("tcp connection", "remote", conn.RemoteAddr().String())
	if err := s.serveStream(ctx, "tcp", conn, conn); err != nil && ctx.Err() == nil {
		s.log.Info("tcp session ended", "err", err)
	}
}
