package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// JSON-RPC 2.0 error codes, and the MCP 2026-07-28 codes. No other code in
// -32000..-32099 is ever sent: that range belongs to the specification.
const (
	CodeParseError     = -32700 // not JSON (or not UTF-8); the id is null
	CodeInvalidRequest = -32600 // JSON, but not a valid request (batches included)
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602 // also: unknown tool, bad cursor, bad log level
	CodeInternalError  = -32603

	CodeResourceNotFound = -32002 // resources/read of a URI that does not exist

	// 2026-07-28 (stateless era).
	CodeHeaderMismatch             = -32020 // an Mcp-Method/Mcp-Name header disagrees with the body
	CodeMissingClientCapability    = -32021 // the request needs a capability the client did not declare
	CodeUnsupportedProtocolVersion = -32022 // data: {supported, requested}
)

// DefaultMaxMessageBytes is the largest message accepted on any transport.
const DefaultMaxMessageBytes = 16 << 20

// Error is a JSON-RPC error object. Handlers return it (possibly wrapped) to
// choose the code; any other error becomes CodeInternalError.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message) }

// errorf makes an Error with a formatted message.
func errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ID is a request id as it was on the wire, in canonical form: a JSON
// integer (any size, echoed digit for digit) or a JSON string (re-encoded,
// so "\u0061" and "a" are the same id). The zero ID is "no id".
type ID struct{ raw string }

// IntID and StringID make ids for server-to-client requests and tests.
func IntID(n int64) ID     { return ID{strconv.FormatInt(n, 10)} }
func StringID(s string) ID { b, _ := marshal(s); return ID{string(b)} }

// IsValid reports whether the ID is present.
func (id ID) IsValid() bool { return id.raw != "" }

// String is the id's JSON text.
func (id ID) String() string { return id.raw }

// MarshalJSON writes the id, or null for the zero ID (only in error
// responses to messages whose id could not be read).
func (id ID) MarshalJSON() ([]byte, error) {
	if id.raw == "" {
		return []byte("null"), nil
	}
	return []byte(id.raw), nil
}

// maxIDBytes bounds an id's JSON text. Ids are echoed and kept as map keys
// while a request runs; a 16 MiB id is an attack, not an id.
const maxIDBytes = 1024

// parseID reads an id: a string or an integer, never null, a fraction or an
// exponent (JSON-RPC 2.0 §4; MCP forbids null).
func parseID(raw json.RawMessage) (ID, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > maxIDBytes {
		return ID{}, errorf(CodeInvalidRequest, "id is %d bytes long, at most %d", len(raw), maxIDBytes)
	}
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return ID{}, errorf(CodeInvalidRequest, "id must be a string or an integer, not null")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return ID{}, errorf(CodeInvalidRequest, "id: %v", err)
		}
		// The canonical form is what is echoed and kept: bound it too
		// (U+2028 or invalid UTF-8 grows by up to 6x when re-encoded).
		id := StringID(s)
		if len(id.raw) > maxIDBytes {
			return ID{}, errorf(CodeInvalidRequest, "id is %d bytes long re-encoded, at most %d", len(id.raw), maxIDBytes)
		}
		return id, nil
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		digits := raw
		if digits[0] == '-' {
			digits = digits[1:]
		}
		if len(digits) == 0 {
			return ID{}, errorf(CodeInvalidRequest, "id must be a string or an integer")
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return ID{}, errorf(CodeInvalidRequest, "id must be a string or an integer, not %s", raw)
			}
		}
		return ID{string(raw)}, nil
	default:
		return ID{}, errorf(CodeInvalidRequest, "id must be a string or an integer, not %s", truncate(string(raw), 40))
	}
}

// message is one decoded JSON-RPC message: a request (Method and ID), a
// notification (Method, no ID) or a response (ID and Result or Error).
type message struct {
	ID     ID
	Method string
	Params json.RawMessage // nil or a JSON object
	Result json.RawMessage
	Error  *Error
	// NoVersion: "jsonrpc" was missing. Tolerated only for the seed's
	// legacy aliases (list_tools, call_tool).
	NoVersion bool
}

func (m *message) isRequest() bool      { return m.Method != "" && m.ID.IsValid() }
func (m *message) isNotification() bool { return m.Method != "" && !m.ID.IsValid() }
func (m *message) isResponse() bool     { return m.Method == "" }

// decodeError is a message that could not be decoded: the error to answer
// with, and the id if one could be read (so the reply reaches its caller).
type decodeError struct {
	ID  ID
	Err *Error
}

// decode reads one message. Field names are matched exactly (encoding/json
// alone would accept "ID" or "Method"); batches, non-objects, bad ids and
// wrong types are invalid requests; bytes that are not JSON or not UTF-8 are
// parse errors.
func decode(data []byte) (*message, *decodeError) {
	data = bytes.TrimSpace(data)
	if !utf8.Valid(data) {
		return nil, &decodeError{Err: errorf(CodeParseError, "parse error: message is not valid UTF-8")}
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		return nil, &decodeError{Err: errorf(CodeParseError, "parse error: %v", err)}
	}
	if len(data) > 0 && data[0] == '[' {
		return nil, &decodeError{Err: errorf(CodeInvalidRequest, "batches (JSON arrays) are not supported: send one message at a time")}
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, &decodeError{Err: errorf(CodeInvalidRequest, "a message must be a JSON object")}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, &decodeError{Err: errorf(CodeParseError, "parse error: %v", err)}
	}
	m := &message{}
	var derr decodeError
	if raw, ok := fields["id"]; ok {
		id, err := parseID(raw)
		if err != nil {
			return nil, &decodeError{Err: err}
		}
		m.ID = id
		derr.ID = id
	}
	fail := func(format string, args ...any) (*message, *decodeError) {
		derr.Err = errorf(CodeInvalidRequest, format, args...)
		return nil, &derr
	}
	if raw, ok := fields["jsonrpc"]; !ok {
		m.NoVersion = true
	} else if string(bytes.TrimSpace(raw)) != `"2.0"` {
		return fail(`"jsonrpc" must be "2.0"`)
	}
	rawMethod, hasMethod := fields["method"]
	_, hasResult := fields["result"]
	rawErr, hasError := fields["error"]
	switch {
	case hasMethod:
		if hasResult || hasError {
			return fail("a message has either a method or a result/error, not both")
		}
		if err := json.Unmarshal(rawMethod, &m.Method); err != nil || m.Method == "" {
			return fail(`"method" must be a non-empty string`)
		}
		if raw, ok := fields["params"]; ok {
			raw = bytes.TrimSpace(raw)
			switch {
			case string(raw) == "null":
			case raw[0] == '{':
				m.Params = raw
			default:
				derr.Err = errorf(CodeInvalidParams, `"params" must be an object`)
				if !m.ID.IsValid() {
					return nil, nil // a notification with bad params: nothing to answer
				}
				return nil, &derr
			}
		}
	case hasResult || hasError:
		if !m.ID.IsValid() {
			return fail("a response needs the id of its request")
		}
		if hasResult && hasError {
			return fail("a response has either a result or an error, not both")
		}
		if m.NoVersion {
			return fail(`"jsonrpc": "2.0" is missing`)
		}
		if hasResult {
			m.Result = bytes.TrimSpace(fields["result"])
		} else {
			m.Error = &Error{}
			if err := json.Unmarshal(rawErr, m.Error); err != nil {
				return fail("error object: %v", err)
			}
		}
	default:
		return fail(`a message needs a "method" (request, notification) or a "result"/"error" (response)`)
	}
	return m, nil
}

// response is a reply on the wire. Result is raw JSON so that it is always
// present in a success reply (even when it is {}).
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      ID              `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// outRequest is a request or notification sent by the server.
type outRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      *ID    `json:"id,omitempty"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// marshal encodes one message as compact JSON on one line (encoding/json
// escapes newlines inside strings, so a message never spans lines).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func encodeResult(id ID, result any) ([]byte, error) {
	raw, err := marshal(result)
	if err != nil {
		return nil, err
	}
	return marshal(response{JSONRPC: "2.0", ID: id, Result: raw})
}

func encodeError(id ID, e *Error) []byte {
	b, err := marshal(response{JSONRPC: "2.0", ID: id, Error: e})
	if err != nil { // Data did not marshal: drop it.
		b, _ = marshal(response{JSONRPC: "2.0", ID: id, Error: &Error{Code: e.Code, Message: e.Message}})
	}
	return b
}

func encodeNotification(method string, params any) ([]byte, error) {
	return marshal(outRequest{JSONRPC: "2.0", Method: method, Params: params})
}

// truncate cuts s to at most n bytes (not inside a UTF-8 character),
// marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// idScanner finds the top-level "id" of a message too large to decode,
// reading it as it streams past in pieces of any size with bounded memory,
// so that the error answering it carries the request's id: a client
// (the TypeScript SDK) cannot match an error with id null to its request,
// and waited for its timeout (issue #17). It reads only the JSON
// structure (strings, nesting, the separators at the top level) and keeps
// at most the current key's first bytes and maxIDBytes of the id.
type idScanner struct {
	depth       int
	inStr, esc  bool
	expectKey   bool   // the next string at depth 1 is a key
	keying      bool   // reading a key
	key         []byte // its first bytes
	lastKey     string // the key whose value comes (depth 1)
	capture     bool   // reading the id's value
	val         []byte
	id          ID
	found, done bool
}

// Write reads the next piece of the message.
func (sc *idScanner) Write(p []byte) {
	for _, c := range p {
		if sc.done {
			return
		}
		if sc.capture {
			if len(sc.val) > maxIDBytes {
				sc.capture = false // not an id: parseID would refuse it
			} else {
				sc.val = append(sc.val, c)
			}
		}
		if sc.inStr {
			switch {
			case sc.esc:
				sc.esc = false
			case c == '\\':
				sc.esc = true
			case c == '"':
				sc.inStr = false
				if sc.keying {
					sc.keying, sc.lastKey = false, string(sc.key)
				}
				continue
			}
			if sc.keying && len(sc.key) < 8 {
				sc.key = append(sc.key, c)
			}
			continue
		}
		switch c {
		case '"':
			sc.inStr = true
			if sc.depth == 1 && sc.expectKey {
				sc.keying, sc.expectKey, sc.key = true, false, sc.key[:0]
			}
		case '{', '[':
			if sc.depth == 0 && c == '{' {
				sc.expectKey = true
			}
			sc.depth++
		case '}', ']':
			sc.depth--
			if sc.depth == 0 {
				sc.endValue()
				sc.done = true
			}
		case ':':
			if sc.depth == 1 && sc.lastKey == "id" && !sc.found {
				sc.capture, sc.val = true, sc.val[:0]
			}
		case ',':
			if sc.depth == 1 {
				sc.endValue()
				sc.expectKey, sc.lastKey = true, ""
			}
		}
	}
}

// endValue ends the value at depth 1; the separator that ended it was
// captured with it.
func (sc *idScanner) endValue() {
	if !sc.capture {
		return
	}
	sc.capture = false
	v := sc.val
	if len(v) > 0 {
		v = v[:len(v)-1]
	}
	if id, err := parseID(v); err == nil {
		sc.id, sc.found = id, true
	}
}

// ID is the id found so far (the zero ID if none).
func (sc *idScanner) ID() ID { return sc.id }

// scanID is the top-level id of a message that could not be decoded
// whole (the zero ID if it has none that can be read).
func scanID(data []byte) ID {
	var sc idScanner
	sc.Write(data)
	return sc.ID()
}
