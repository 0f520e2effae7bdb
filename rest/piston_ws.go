package rest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
)

// Piston's interactive endpoint (v2.js router.ws('/connect')): the client
// sends {"type":"init", ...a job...} within a second, then {"type":"data",
// "stream":"stdin","data":...} and {"type":"signal","signal":"SIGINT"};
// the server sends {"type":"runtime"}, {"type":"stage"}, {"type":"data"}
// for the program's output as it comes, {"type":"exit"} after each stage,
// {"type":"error"} before a 4002 close, and closes with 4999 once the job
// is done. The close codes are Piston's.
//
// Differences: a signal ends the run (sandcell kills the sandbox; it does
// not forward signals into it), and the exit then reports SIGKILL; the
// program's output is capped per stream as every run's is.

const (
	wsInitTimeout  = time.Second      // Piston's: the socket closes if no init came by then
	wsWriteTimeout = 10 * time.Second // a client that reads nothing for this long is dropped
	wsMaxStdin     = 1 << 20          // stdin sent and not yet read by the program
)

// Piston's close codes.
const (
	closeAlreadyInit websocket.StatusCode = 4000
	closeInitTimeout websocket.StatusCode = 4001
	closeNotified    websocket.StatusCode = 4002
	closeNotInit     websocket.StatusCode = 4003
	closeOnlyStdin   websocket.StatusCode = 4004
	closeBadSignal   websocket.StatusCode = 4005
	closeJobDone     websocket.StatusCode = 4999
)

var rtSignal = regexp.MustCompile(`^SIGRT(MIN(\+([1-9]|1[0-5]))?|MAX(-([1-9]|1[0-4]))?)$`)

// pistonSignal reports whether name is one of Piston's signal names
// (globals.js SIGNALS).
func pistonSignal(name string) bool {
	return (unix.SignalNum(name) != 0 && name != "SIGCLD" && name != "SIGPOLL" && name != "SIGIOT") || rtSignal.MatchString(name)
}

func (h *Handler) pistonConnect(w http.ResponseWriter, r *http.Request) {
	// The Origin was checked by ServeHTTP's Guard with /mcp's rules
	// (loopback origins and --allow-origin ones): the library's own
	// same-host check would refuse loopback pages on another port.
	// Guard is what stops cross-site WebSocket hijacking.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the handshake's error
	}
	defer c.CloseNow()
	c.SetReadLimit(h.opts.MaxBodyBytes)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	s := &wsSession{h: h, c: c, ctx: ctx, cancel: cancel, out: newEventQueue(), stdin: newStdinQueue(wsMaxStdin)}
	s.serve()
}

// wsSession is one /connect connection.
type wsSession struct {
	h      *Handler
	c      *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	out    *eventQueue
	stdin  *stdinQueue

	mu      sync.Mutex
	job     *pistonJob
	runStop context.CancelFunc
	killed  bool
	closed  bool
}

func (s *wsSession) serve() {
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); s.writer() }()
	initTimer := time.AfterFunc(wsInitTimeout, func() {
		s.mu.Lock()
		none := s.job == nil
		s.mu.Unlock()
		if none {
			s.close(closeInitTimeout, "Initialization Timeout")
		}
	})
	defer initTimer.Stop()
	var jobDone chan struct{}
	for {
		_, msg, err := s.c.Read(s.ctx)
		if err != nil {
			break
		}
		if done := s.handle(msg); done != nil {
			jobDone = done
		}
	}
	// The client left or the socket was closed: stop the run, if any.
	s.stopRun(false)
	s.stdin.Close()
	if jobDone != nil {
		<-jobDone
	}
	s.out.close()
	<-writerDone
}

// handle is one client message; it returns the job's done channel when
// the message started it.
func (s *wsSession) handle(msg []byte) chan struct{} {
	var m struct {
		Type   string `json:"type"`
		Stream string `json:"stream"`
		Data   string `json:"data"`
		Signal string `json:"signal"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		s.notify("the message is not a JSON object: " + err.Error())
		return nil
	}
	s.mu.Lock()
	job, closed := s.job, s.closed
	s.mu.Unlock()
	if closed {
		return nil // closing: what still comes is not read
	}
	switch m.Type {
	case "init":
		if job != nil {
			s.close(closeAlreadyInit, "Already Initialized")
			return nil
		}
		job, err := s.h.pistonParse(msg)
		if err != nil {
			s.notify(err.Error())
			return nil
		}
		s.mu.Lock()
		s.job = job
		s.mu.Unlock()
		done := make(chan struct{})
		go func() { defer close(done); s.run(job) }()
		return done
	case "data":
		switch {
		case job == nil:
			s.close(closeNotInit, "Not yet initialized")
		case m.Stream != "stdin":
			s.close(closeOnlyStdin, "Can only write to stdin")
		default:
			if err := s.stdin.Write([]byte(m.Data)); err != nil {
				s.notify(err.Error())
			}
		}
	case "signal":
		switch {
		case job == nil:
			s.close(closeNotInit, "Not yet initialized")
		case !pistonSignal(m.Signal):
			s.close(closeBadSignal, "Invalid signal")
		default:
			s.stopRun(true)
		}
	}
	return nil
}

// run runs the job, sending its events, and closes the socket with 4999.
func (s *wsSession) run(job *pistonJob) {
	ctx, stop := context.WithCancel(s.ctx)
	defer stop()
	s.mu.Lock()
	s.runStop = stop
	s.mu.Unlock()
	s.send(map[string]any{"type": "runtime", "language": job.rt.Language, "version": job.rt.Version})
	compiled := job.compiled
	if compiled {
		s.send(map[string]any{"type": "stage", "stage": "compile"})
	} else {
		s.send(map[string]any{"type": "stage", "stage": "run"})
	}
	req := job.req
	req.Stdin, req.StdinStream = nil, s.stdin // the init's stdin is not used (as in Piston)
	req.Output = func(stream, text string) {
		s.send(map[string]any{"type": "data", "stream": strings.TrimPrefix(stream, "compile "), "data": text})
	}
	req.PhaseDone = func(phase string, p api.Phase) {
		st := pistonStageOf(p, "")
		s.mu.Lock()
		if s.killed {
			sig := "SIGKILL"
			st.Code, st.Signal = nil, &sig
		}
		s.mu.Unlock()
		s.send(map[string]any{"type": "exit", "stage": phase, "code": st.Code, "signal": st.Signal})
		if phase == "compile" && p.Status == api.StatusOK {
			s.send(map[string]any{"type": "stage", "stage": "run"})
		}
	}
	_, err := s.h.opts.Executor.Execute(ctx, executor.Request{Request: req, Admit: s.h.opts.Admit})
	s.stdin.Close() // the program is gone: the copy of stdin ends
	if err != nil {
		s.notify(err.Error())
		return
	}
	s.flushAndClose(closeJobDone, "Job Completed")
}

// stopRun ends the run in flight (a signal message, or the client left).
func (s *wsSession) stopRun(bySignal bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runStop != nil {
		s.killed = s.killed || bySignal
		s.runStop()
	}
}

// send queues an event for the client; it never blocks (api.Request.Output
// must not): the queue holds at most the run's capped output.
func (s *wsSession) send(v any) {
	b, err := json.Marshal(v)
	if err == nil {
		s.out.push(b)
	}
}

// writer sends the queued events in order until the queue is closed and
// empty; a client that does not take one within wsWriteTimeout ends the
// session.
func (s *wsSession) writer() {
	for {
		b, ok := s.out.pop()
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, wsWriteTimeout)
		err := s.c.Write(ctx, websocket.MessageText, b)
		cancel()
		if err != nil {
			s.stopRun(false)
			s.cancel()
			return
		}
	}
}

// notify sends an error event and closes with 4002, as Piston does (a
// close reason is limited to 123 bytes, so the message goes first).
func (s *wsSession) notify(msg string) {
	s.send(map[string]any{"type": "error", "message": msg})
	s.flushAndClose(closeNotified, "Notified Error")
}

// flushAndClose closes the socket once the queued events are sent.
func (s *wsSession) flushAndClose(code websocket.StatusCode, reason string) {
	s.out.waitEmpty(s.ctx)
	s.close(code, reason)
}

// close closes the socket with a Piston close code (once) and stops the
// run.
func (s *wsSession) close(code websocket.StatusCode, reason string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.stopRun(false)
	go func() {
		s.c.Close(code, reason) // waits for the client's close, at most 5 s
		s.cancel()
	}()
}

// eventQueue is the events waiting to be written, in order. Its size is
// bounded by what is pushed: a run's capped output and a few events.
type eventQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  [][]byte
	busy   bool // an item was popped and is being written
	closed bool
}

func newEventQueue() *eventQueue {
	q := &eventQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *eventQueue) push(b []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.items = append(q.items, b)
		q.cond.Broadcast()
	}
}

// pop waits for the next item; false once closed and empty.
func (q *eventQueue) pop() ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.busy = false
	q.cond.Broadcast()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return nil, false
	}
	b := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	q.busy = true
	return b, true
}

// waitEmpty waits until every pushed item was written (or ctx ended).
func (q *eventQueue) waitEmpty(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.closed = true
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for (len(q.items) > 0 || q.busy) && !q.closed {
		q.cond.Wait()
	}
}

func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.items = nil
	q.cond.Broadcast()
}

// stdinQueue is the stdin a client sent and the program has not read yet:
// the run's api.Request.StdinStream. Write refuses past max bytes waiting,
// so a program that never reads cannot make the server hold more; Read
// blocks until data or Close.
type stdinQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	max    int
	closed bool
}

var errStdinFull = errors.New("stdin: more than 1 MiB sent that the program has not read")

func newStdinQueue(max int) *stdinQueue {
	q := &stdinQueue{max: max}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *stdinQueue) Write(p []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return nil // the program is gone: nobody reads it
	case len(q.buf)+len(p) > q.max:
		return errStdinFull
	}
	q.buf = append(q.buf, p...)
	q.cond.Broadcast()
	return nil
}

func (q *stdinQueue) Read(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.buf) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, q.buf)
	q.buf = q.buf[n:]
	if len(q.buf) == 0 {
		q.buf = nil
	}
	return n, nil
}

// Close ends the stream: Read returns EOF once the buffer is empty.
func (q *stdinQueue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.buf = nil
	q.cond.Broadcast()
}
