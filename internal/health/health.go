// Package health gives a server its liveness and readiness endpoints and
// its graceful drain, for an orchestrator (Kubernetes probes, a load
// balancer's health check) that stops a replica by signal.
//
// Invariant: once a drain begins the server takes no new session (an MCP
// request over HTTP without Mcp-Session-Id, a new TCP connection), each
// refused with a clear error that says to go to another replica, while
// the requests of sessions it already has run to their end; readiness
// reports the drain from its first moment, so the load balancer stops
// sending new sessions here, and liveness stays ok, so the orchestrator
// does not kill the replica mid-drain.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Paths of the endpoints (Kubernetes' own convention). They answer
// without authentication: they say only "ok" or "draining".
const (
	LivePath  = "/healthz"
	ReadyPath = "/readyz"
)

// sessionHeader names an MCP session over HTTP (Streamable HTTP); a POST
// without it opens a new session, or is a one-request session of its own.
const sessionHeader = "Mcp-Session-Id"

// refusal is the JSON-RPC error code of a request refused by the drain:
// -32000, the first of the range JSON-RPC leaves to servers.
const refusal = -32000

// Message is the error a new session gets during a drain.
const Message = "server is draining (shutting down): it takes no new sessions; start one again, the load balancer sends it to another replica"

// Drainer tracks a server's requests in flight and its drain. The zero
// value is a server not draining, with nothing in flight.
type Drainer struct {
	// Busy, if set, counts work in flight that the HTTP wrapper does not
	// see (runs of TCP and stdio sessions: the admission gate's running
	// and waiting runs). Drain waits for it to be 0 too.
	Busy func() int

	mu       sync.Mutex
	draining bool
	inflight int
	changed  chan struct{} // closed and replaced when inflight drops
}

// Draining reports whether a drain has begun.
func (d *Drainer) Draining() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.draining
}

// Wrap is next (the MCP endpoint) behind the drain: during a drain a POST
// without Mcp-Session-Id gets 503, Retry-After and a JSON-RPC error
// (Message); every other request is served, and a POST or DELETE counts
// as in flight until it returns. A GET (a session's SSE stream) does not
// count: it lasts as long as the client wants.
func (d *Drainer) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		d.mu.Lock()
		if d.draining && r.Method == http.MethodPost && r.Header.Get(sessionHeader) == "" {
			d.mu.Unlock()
			refuse(w)
			return
		}
		d.inflight++
		d.mu.Unlock()
		defer d.done()
		next.ServeHTTP(w, r)
	})
}

func (d *Drainer) done() {
	d.mu.Lock()
	d.inflight--
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
	d.mu.Unlock()
}

// refusalBody is the JSON-RPC error of a new session during a drain (id
// null: it answers no request it read).
func refusalBody() []byte {
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": refusal, "message": Message},
	})
	return append(body, '\n')
}

func refuse(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(refusalBody())
}

// Live answers liveness: 200 while the process serves HTTP, draining or
// not.
func (d *Drainer) Live(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

// Ready answers readiness: 200 while the server takes new sessions, 503
// "draining" from the moment a drain begins.
func (d *Drainer) Ready(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if d.Draining() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "draining\n")
		return
	}
	io.WriteString(w, "ok\n")
}

// Handle registers the endpoints on mux.
func (d *Drainer) Handle(mux *http.ServeMux) {
	mux.HandleFunc(LivePath, d.Live)
	mux.HandleFunc(ReadyPath, d.Ready)
}

// Drain begins the drain and waits until nothing is in flight (no
// wrapped request, Busy 0) or ctx ends; then it returns ctx's error. The
// caller then stops the server (whatever still runs is cancelled).
func (d *Drainer) Drain(ctx context.Context) error {
	d.mu.Lock()
	d.draining = true
	d.mu.Unlock()
	// Busy has no notification: poll it, often enough for a run's end to
	// be noticed within a tenth of a second.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		d.mu.Lock()
		n := d.inflight
		if n > 0 && d.changed == nil {
			d.changed = make(chan struct{})
		}
		changed := d.changed
		d.mu.Unlock()
		if n == 0 && (d.Busy == nil || d.Busy() == 0) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain: %d requests and %d runs still in flight: %w", n, d.busy(), ctx.Err())
		case <-changed:
		case <-tick.C:
		}
	}
}

func (d *Drainer) busy() int {
	if d.Busy == nil {
		return 0
	}
	return d.Busy()
}

// Listener is ln behind the drain: during a drain a new connection gets
// one JSON-RPC error line (Message) and is closed; connections accepted
// before go on.
func (d *Drainer) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, d: d} }

type listener struct {
	net.Listener
	d *Drainer
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !l.d.Draining() {
			return c, err
		}
		// Bounded: a client that does not read does not hold Accept.
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(refusalBody())
		c.Close()
	}
}
