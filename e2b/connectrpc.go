package e2b

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Connect RPC with the JSON codec, as envd speaks it and the SDKs call it
// (JS: createConnectTransport({useBinaryFormat: false}); Python: a codec
// named "json"). Connect's protocol (connectrpc.com/docs/protocol):
//   - unary: POST, Content-Type application/json, the message as the body;
//     an error is an HTTP status with {"code","message"};
//   - streaming: Content-Type application/connect+json, each message in an
//     envelope (1 flag byte, 4 bytes big-endian length, the JSON), the
//     response ending with an envelope of flag 0x02 holding {} or
//     {"error":{...}} (and "metadata"), always with HTTP 200.
// Server streaming and client streaming both fit HTTP/1.1 (a request body
// and a response body, each streamed); only bidirectional streaming needs
// HTTP/2, and envd has none.

// rpcError is a Connect error: code is one of Connect's code names.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *rpcError) Error() string { return e.Code + ": " + e.Message }

func rpcErr(code, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// httpStatus is Connect's HTTP status for a code (the protocol's table).
var httpStatus = map[string]int{
	"canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
	"not_found": 404, "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429,
	"failed_precondition": 400, "aborted": 409, "out_of_range": 400, "unimplemented": 501,
	"internal": 500, "unavailable": 503, "data_loss": 500, "unauthenticated": 401,
}

// asRPC maps a service error onto a Connect error.
func asRPC(what string, err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	code := "internal"
	switch statusOf(err) {
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusBadRequest:
		code = "invalid_argument"
	case http.StatusTooManyRequests:
		code = "resource_exhausted"
	case http.StatusGatewayTimeout:
		code = "deadline_exceeded"
	}
	if errors.Is(err, context.Canceled) {
		code = "canceled"
	}
	msg := err.Error()
	if what != "" {
		msg = what + ": " + msg
	}
	return &rpcError{Code: code, Message: msg}
}

const (
	flagEndStream = 0x02
	flagCompress  = 0x01
	maxMessage    = 16 << 20 // a message's largest size: SendInput chunks, listings
)

func contentType(r *http.Request) string {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt
}

// rpcContext bounds an RPC by its Connect-Timeout-Ms.
func rpcContext(r *http.Request) (context.Context, context.CancelFunc) {
	if v := r.Header.Get("Connect-Timeout-Ms"); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return context.WithTimeout(r.Context(), time.Duration(ms)*time.Millisecond)
		}
	}
	return context.WithCancel(r.Context())
}

// unary serves a unary RPC: decode the request into req, call f, write
// its response or error.
func unary[Req, Resp any](w http.ResponseWriter, r *http.Request, f func(ctx context.Context, req *Req) (*Resp, error)) {
	if r.Method != http.MethodPost {
		writeRPCError(w, rpcErr("unimplemented", "%s: want POST", r.Method))
		return
	}
	if ct := contentType(r); ct != "application/json" {
		// Connect answers an unsupported codec with 415.
		w.Header().Set("Accept-Post", "application/json")
		http.Error(w, "unsupported content type "+ct+": this envd speaks Connect with the JSON codec", http.StatusUnsupportedMediaType)
		return
	}
	var req Req
	b, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
	if err == nil && len(b) > maxMessage {
		err = errors.New("message larger than 16 MiB")
	}
	if err == nil && len(b) > 0 {
		err = json.Unmarshal(b, &req)
	}
	if err != nil {
		writeRPCError(w, rpcErr("invalid_argument", "request: %v", err))
		return
	}
	ctx, cancel := rpcContext(r)
	defer cancel()
	resp, err := f(ctx, &req)
	if err != nil {
		writeRPCError(w, asRPC("", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func writeRPCError(w http.ResponseWriter, e *rpcError) {
	st, ok := httpStatus[e.Code]
	if !ok {
		st = 500
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st)
	json.NewEncoder(w).Encode(e)
}

// readEnvelope reads one enveloped message of a streaming request (io.EOF
// at the end of the body).
func readEnvelope(r io.Reader) (flags byte, msg []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, errors.New("truncated envelope header")
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return 0, nil, fmt.Errorf("message of %d bytes: the most is %d", n, maxMessage)
	}
	msg = make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, nil, fmt.Errorf("truncated message: %w", err)
	}
	if hdr[0]&flagCompress != 0 {
		return 0, nil, errors.New("compressed message: this envd takes none (it sends no Connect-Accept-Encoding)")
	}
	return hdr[0], msg, nil
}

// stream is a server-streaming response.
type stream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	mu  sync.Mutex
	err error // the first write error: the client is gone
}

// startStream checks a streaming request, decodes its one message into req
// (server streaming) and starts the response.
func startStream(w http.ResponseWriter, r *http.Request, req any) (*stream, bool) {
	if r.Method != http.MethodPost || contentType(r) != "application/connect+json" {
		w.Header().Set("Accept-Post", "application/connect+json")
		http.Error(w, "want POST application/connect+json: this envd speaks Connect with the JSON codec", http.StatusUnsupportedMediaType)
		return nil, false
	}
	// Read the request before answering: an HTTP/1.1 server closes the
	// request body once the response has begun.
	var rerr error
	if req != nil {
		_, msg, err := readEnvelope(io.LimitReader(r.Body, maxMessage+5))
		if err == nil {
			err = json.Unmarshal(msg, req)
		}
		rerr = err
	}
	s := newStream(w)
	if rerr != nil {
		s.end(rpcErr("invalid_argument", "request: %v", rerr))
		return nil, false
	}
	return s, true
}

// serveStream serves a server-streaming RPC: decode its request, start the
// response, run f under the call's deadline.
func serveStream[Req any](w http.ResponseWriter, r *http.Request, f func(ctx context.Context, s *stream, req *Req)) {
	var req Req
	s, ok := startStream(w, r, &req)
	if !ok {
		return
	}
	ctx, cancel := rpcContext(r)
	defer cancel()
	f(ctx, s, &req)
}

func newStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, rc: http.NewResponseController(w)}
	s.rc.Flush()
	return s
}

func (s *stream) frame(flags byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding a stream message: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	if _, err := s.w.Write(append(hdr[:], b...)); err != nil {
		s.err = err
		return err
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
	return s.err
}

// send writes one message.
func (s *stream) send(v any) error { return s.frame(0, v) }

// end writes the end-of-stream message, with e if the call failed.
func (s *stream) end(e *rpcError) {
	body := map[string]any{}
	if e != nil {
		body["error"] = e
	}
	s.frame(flagEndStream, body)
}
