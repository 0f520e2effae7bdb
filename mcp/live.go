package mcp

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Live output: while a run goes on, a call that carries a progressToken
// receives the program's output as notifications/progress, in order, at a
// bounded rate, and none after the response. Each notification carries one
// chunk of one stream: message "[stdout] TEXT" (or stderr, or "compile
// stdout"...), and in _meta the stream and the exact text
// ("sandcell/stream", "sandcell/text"). progress counts the notifications
// (it must increase); there is no total. Without output for a while a
// heartbeat ("running, 3 s") goes out instead.
//
// A notification ends at the end of a line: the end of a stream's output
// after its last newline is held until the line is complete, other output
// comes (which keeps the order of the streams), it reaches liveChunkBytes,
// it waited liveHold (a prompt without a newline), or the run ends. A
// program that writes a line in pieces no longer shows it cut in two
// (issue #17).
const (
	liveInterval   = 100 * time.Millisecond // at most one batch of notifications per interval
	liveChunkBytes = 16 << 10               // the largest text of one notification
	liveBatch      = 8                      // notifications per batch at most
	livePending    = 1 << 20                // output waiting to be sent; past it, dropped (the result has it all)
	liveHold       = 500 * time.Millisecond // the longest a line's start waits for its end
)

// Keys of a live-output notification's _meta.
const (
	MetaStream = "sandcell/stream"
	MetaText   = "sandcell/text"
)

type liveChunk struct {
	stream, text string
}

type liveOutput struct {
	req       *CallToolRequest
	heartbeat time.Duration
	start     time.Time

	mu        sync.Mutex
	pending   []liveChunk
	bytes     int
	dropped   int
	held      liveChunk // the end of the output after its last newline
	heldSince time.Time

	seq      float64
	wake     chan struct{}
	done     chan struct{}
	finished chan struct{}
}

// startLiveOutput starts the sender if the call asked for progress (nil
// otherwise; a nil *liveOutput's stop does nothing).
func startLiveOutput(req *CallToolRequest, heartbeat time.Duration) *liveOutput {
	if req == nil || req.ex == nil || len(req.ex.token) == 0 {
		return nil
	}
	l := &liveOutput{req: req, heartbeat: heartbeat, start: time.Now(),
		wake: make(chan struct{}, 1), done: make(chan struct{}), finished: make(chan struct{})}
	l.notify("starting the sandbox", nil)
	go l.loop()
	return l
}

// add queues a chunk of output, holding back what follows its last
// newline; it never blocks.
func (l *liveOutput) add(stream, text string) {
	if text == "" {
		return
	}
	l.mu.Lock()
	if l.held.text != "" && l.held.stream != stream {
		l.releaseLocked() // another stream speaks: keep the order
	}
	text = l.held.text + text
	l.held.text = ""
	cut := strings.LastIndexByte(text, '\n') + 1
	l.queueLocked(stream, text[:cut])
	if rest := text[cut:]; len(rest) > liveChunkBytes {
		l.queueLocked(stream, rest)
	} else if rest != "" {
		if cut > 0 || l.heldSince.IsZero() {
			l.heldSince = time.Now()
		}
		l.held = liveChunk{stream, rest}
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// queueLocked queues text unless too much waits already (l.mu held).
func (l *liveOutput) queueLocked(stream, text string) {
	switch {
	case text == "":
	case l.bytes+len(text) > livePending:
		l.dropped += len(text)
	default:
		l.pending = append(l.pending, liveChunk{stream, text})
		l.bytes += len(text)
	}
}

// releaseLocked queues the held text (l.mu held).
func (l *liveOutput) releaseLocked() {
	l.queueLocked(l.held.stream, l.held.text)
	l.held, l.heldSince = liveChunk{}, time.Time{}
}

// holdLeft is how long the held text may still wait (ok false: none is
// held).
func (l *liveOutput) holdLeft() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held.text == "" {
		return 0, false
	}
	return liveHold - time.Since(l.heldSince), true
}

// stop sends what is queued and ends the sender; after it returns nothing
// more is sent, so the response can go.
func (l *liveOutput) stop() {
	if l == nil {
		return
	}
	close(l.done)
	<-l.finished
}

func (l *liveOutput) loop() {
	defer close(l.finished)
	hb := time.NewTimer(l.heartbeat)
	defer hb.Stop()
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	defer hold.Stop()
	var last time.Time
	for {
		select {
		case <-l.done:
			l.mu.Lock()
			l.releaseLocked()
			l.mu.Unlock()
			for l.flush(-1) {
			}
			return
		case <-hb.C:
			l.notify(fmt.Sprintf("running, %.0f s", time.Since(l.start).Seconds()), nil)
			hb.Reset(l.heartbeat)
		case <-hold.C:
			if left, ok := l.holdLeft(); ok && left <= 0 {
				l.mu.Lock()
				l.releaseLocked()
				l.mu.Unlock()
				select {
				case l.wake <- struct{}{}:
				default:
				}
			}
		case <-l.wake:
			// Rate bound: one batch per interval.
			if wait := liveInterval - time.Since(last); wait > 0 {
				select {
				case <-time.After(wait):
				case <-l.done:
				}
			}
			last = time.Now()
			if l.flush(liveBatch) {
				select { // more is queued: come back after the interval
				case l.wake <- struct{}{}:
				default:
				}
			}
			hb.Reset(l.heartbeat)
		}
		if left, ok := l.holdLeft(); ok {
			hold.Reset(max(left, time.Millisecond))
		}
	}
}

// flush sends up to n notifications (n < 0: all) of the queued output,
// merging consecutive chunks of one stream; it reports whether output is
// still queued.
func (l *liveOutput) flush(n int) bool {
	l.mu.Lock()
	var out []liveChunk
	for len(l.pending) > 0 && (n < 0 || len(out) < n) {
		c := l.pending[0]
		if len(c.text) > liveChunkBytes {
			cut := liveChunkBytes
			for cut > 0 && !utf8.RuneStart(c.text[cut]) {
				cut--
			}
			if cut == 0 {
				cut = liveChunkBytes
			}
			l.pending[0].text = c.text[cut:]
			c.text = c.text[:cut]
		} else {
			l.pending = l.pending[1:]
		}
		l.bytes -= len(c.text)
		if k := len(out) - 1; k >= 0 && out[k].stream == c.stream && len(out[k].text)+len(c.text) <= liveChunkBytes {
			out[k].text += c.text
		} else {
			out = append(out, c)
		}
	}
	dropped := 0
	if len(l.pending) == 0 {
		dropped, l.dropped = l.dropped, 0
	}
	more := len(l.pending) > 0
	l.mu.Unlock()
	for _, c := range out {
		l.notify("["+c.stream+"] "+c.text, map[string]any{MetaStream: c.stream, MetaText: c.text})
	}
	if dropped > 0 {
		l.notify(fmt.Sprintf("[sandcell] %d bytes of live output were not sent (too fast); the result has all of it", dropped), nil)
	}
	return more
}

func (l *liveOutput) notify(message string, meta map[string]any) {
	l.seq++
	l.req.ex.progress(l.seq, nil, message, meta)
}
