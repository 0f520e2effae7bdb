package mcp

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecode feeds arbitrary bytes to decode, the JSON-RPC codec of every
// transport, and checks it against an oracle built on encoding/json alone:
//
//   - no panic;
//   - bytes that are not UTF-8 or not JSON are CodeParseError, a batch or
//     any other non-object CodeInvalidRequest, a bad object
//     CodeInvalidRequest, or CodeInvalidParams when only "params" is wrong;
//     no other code; the error carries the message's id when it was valid
//     (so that the reply reaches its caller), and no id otherwise;
//   - the error reply encodes to one line of valid JSON-RPC, at most
//     maxErrorReply bytes whatever the input's size;
//   - a decoded message is exactly one of request, notification and
//     response, its id is the canonical form of the input's, its params
//     are an object, and it re-encodes to one line of JSON that decodes
//     to the same message;
//   - surrounding whitespace (as a line of the stream has) changes
//     nothing.
//
// FuzzDispatch covers the same bytes end to end, with weaker checks.
// Seed corpus: testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":"a\u0062","method":"tools/list","params":{"cursor":"c1"}}`,
		`{"jsonrpc":"2.0","id":-0,"method":"ping","params":null}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}`,
		`{"jsonrpc":"2.0","id":5,"method":"ping","params":"x"}`,
		`{"jsonrpc":"2.0","id":"s-1","result":{"content":[]}}`,
		`{"jsonrpc":"2.0","id":"s-2","error":{"code":-1,"message":"no","data":{"a":[1,2.5e3]}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`,
		`{"method":"call_tool","params":{"tool":"execute_code"},"id":2}`,
		`{"jsonrpc":"2.0","id":1,"id":"2","method":"ping"}`,
		`{"jsonrpc":"2.0","ID":1,"Method":"ping"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"x"}]`,
		`[]`, `7`, `"ping"`, `null`, ``, `{`, "\xff", "\u00a0{}",
		`{"jsonrpc":"2.0","id":1.0,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":"` + strings.Repeat("x", maxIDBytes) + `","method":"ping"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, derr := decode(data)
		want := oracleDecode(data)
		switch {
		case derr != nil:
			checkDecodeError(t, data, want, derr)
		case m == nil:
			if !want.ignorable {
				t.Fatalf("decode(%q) = nothing to answer; only a notification with bad params may be ignored", data)
			}
		default:
			checkDecoded(t, data, want, m)
		}
		// A line of the stream keeps its newline; the JSON whitespace
		// around a message is no part of it.
		padded := append(append([]byte(" \t"), data...), "\r\n"...)
		m2, derr2 := decode(padded)
		if !sameOutcome(m, derr, m2, derr2) {
			t.Fatalf("decode(%q) and decode(%q) differ", data, padded)
		}
	})
}

// maxErrorReply bounds the reply to a message that did not decode: the
// id (at most maxIDBytes) and a short message, never an echo of the input.
const maxErrorReply = 2*maxIDBytes + 512

// decodeOracle is what encoding/json alone says about a message.
type decodeOracle struct {
	parseError bool // not UTF-8, or not JSON
	object     bool
	fields     map[string]json.RawMessage // when object
	id         ID                         // the valid id the message carries, if any
	badID      bool                       // an "id" that is not a valid id
	// ignorable: a notification whose params are not an object (the one
	// message decode may drop without an answer).
	ignorable bool
}

func oracleDecode(data []byte) decodeOracle {
	var o decodeOracle
	data = bytes.TrimSpace(data)
	if !utf8.Valid(data) || !json.Valid(data) {
		o.parseError = true
		return o
	}
	if data[0] != '{' || json.Unmarshal(data, &o.fields) != nil {
		return o // an array or a scalar
	}
	o.object = true
	if raw, ok := o.fields["id"]; ok {
		o.id, o.badID = oracleID(raw)
	}
	var method string
	if raw, ok := o.fields["params"]; ok && json.Unmarshal(o.fields["method"], &method) == nil && method != "" {
		_, hasID := o.fields["id"]
		raw = bytes.TrimSpace(raw)
		o.ignorable = !hasID && string(raw) != "null" && raw[0] != '{'
	}
	return o
}

// oracleID is the canonical form of an id: a string re-encoded, an
// integer as written; anything else (or longer than maxIDBytes, as written
// or re-encoded) is bad.
func oracleID(raw json.RawMessage) (id ID, bad bool) {
	if len(bytes.TrimSpace(raw)) > maxIDBytes {
		return ID{}, true
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return ID{}, true
	}
	switch v := v.(type) {
	case string:
		id := StringID(v)
		return id, len(id.String()) > maxIDBytes
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			return ID{}, true
		}
		return ID{string(v)}, false
	}
	return ID{}, true
}

func checkDecodeError(t *testing.T, data []byte, want decodeOracle, derr *decodeError) {
	t.Helper()
	if derr.Err == nil {
		t.Fatalf("decode(%q): a decode error without an error object", data)
	}
	code := derr.Err.Code
	switch {
	case want.parseError:
		if code != CodeParseError {
			t.Fatalf("decode(%q): error %d (%s), want CodeParseError", data, code, derr.Err.Message)
		}
	case !want.object:
		if code != CodeInvalidRequest {
			t.Fatalf("decode(%q): error %d (%s) for a batch or scalar, want CodeInvalidRequest", data, code, derr.Err.Message)
		}
	case code == CodeInvalidParams:
		if _, ok := want.fields["params"]; !ok || want.badID || !derr.ID.IsValid() {
			t.Fatalf("decode(%q): CodeInvalidParams, but no params or no valid id", data)
		}
	case code != CodeInvalidRequest:
		t.Fatalf("decode(%q): error %d (%s), want CodeInvalidRequest or CodeInvalidParams", data, code, derr.Err.Message)
	}
	if derr.ID != want.id && !want.badID {
		t.Fatalf("decode(%q): error for id %q, the message's id is %q", data, derr.ID, want.id)
	}
	if want.badID && derr.ID.IsValid() {
		t.Fatalf("decode(%q): error names id %s of an invalid id", data, derr.ID)
	}
	reply := encodeError(derr.ID, derr.Err)
	if len(reply) > maxErrorReply {
		t.Fatalf("decode(%.200q): error reply of %d bytes, at most %d", data, len(reply), maxErrorReply)
	}
	var r struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *Error          `json:"error"`
	}
	if bytes.ContainsAny(reply, "\r\n") || json.Unmarshal(reply, &r) != nil {
		t.Fatalf("decode(%q): error reply %q is not one line of JSON", data, reply)
	}
	wantID := "null"
	if derr.ID.IsValid() {
		wantID = derr.ID.String()
	}
	if r.JSONRPC != "2.0" || string(r.ID) != wantID || r.Result != nil || r.Error == nil || r.Error.Code != code || r.Error.Message == "" {
		t.Fatalf("decode(%q): error reply %q, want jsonrpc 2.0, id %s and error %d with a message", data, reply, wantID, code)
	}
}

func checkDecoded(t *testing.T, data []byte, want decodeOracle, m *message) {
	t.Helper()
	if !want.object || want.badID {
		t.Fatalf("decode(%q) succeeded; the oracle says object %v, bad id %v", data, want.object, want.badID)
	}
	if m.ID != want.id {
		t.Fatalf("decode(%q): id %s, want %s", data, m.ID, want.id)
	}
	kinds := 0
	for _, is := range []bool{m.isRequest(), m.isNotification(), m.isResponse()} {
		if is {
			kinds++
		}
	}
	if kinds != 1 {
		t.Fatalf("decode(%q): %d kinds of message, want 1", data, kinds)
	}
	_, hasVersion := want.fields["jsonrpc"]
	if m.NoVersion == hasVersion {
		t.Fatalf("decode(%q): NoVersion %v, but the input has jsonrpc: %v", data, m.NoVersion, hasVersion)
	}
	if m.Method != "" {
		var method string
		if json.Unmarshal(want.fields["method"], &method) != nil || method != m.Method {
			t.Fatalf("decode(%q): method %q, the input's is %s", data, m.Method, want.fields["method"])
		}
		if m.Result != nil || m.Error != nil {
			t.Fatalf("decode(%q): a request with a result or error", data)
		}
		if m.Params != nil && (!json.Valid(m.Params) || m.Params[0] != '{') {
			t.Fatalf("decode(%q): params %q are not an object", data, m.Params)
		}
	} else {
		if !m.ID.IsValid() || (m.Result == nil) == (m.Error == nil) || m.NoVersion {
			t.Fatalf("decode(%q): a response needs jsonrpc, an id and exactly one of result and error", data)
		}
		if m.Result != nil && !json.Valid(m.Result) {
			t.Fatalf("decode(%q): result %q is not JSON", data, m.Result)
		}
	}

	// Re-encode as the server would send it, and decode again.
	var out []byte
	var err error
	switch {
	case m.Error != nil:
		out = encodeError(m.ID, m.Error)
	case m.Method == "":
		out, err = marshal(response{JSONRPC: "2.0", ID: m.ID, Result: m.Result})
	default:
		req := outRequest{JSONRPC: "2.0", Method: m.Method}
		if m.ID.IsValid() {
			req.ID = &m.ID
		}
		if m.Params != nil {
			req.Params = m.Params
		}
		out, err = marshal(req)
	}
	if err != nil {
		t.Fatalf("decode(%q): re-encoding failed: %v", data, err)
	}
	if bytes.ContainsAny(out, "\r\n") || !json.Valid(out) {
		t.Fatalf("decode(%q): re-encoded %q is not one line of JSON", data, out)
	}
	again, derr := decode(out)
	if derr != nil {
		t.Fatalf("decode(%q): re-encoded %q does not decode: %v", data, out, derr.Err)
	}
	if again.ID != m.ID || again.Method != m.Method || !jsonSame(again.Params, m.Params) ||
		!jsonSame(again.Result, m.Result) || !jsonSame(mustMarshal(t, again.Error), mustMarshal(t, m.Error)) {
		t.Fatalf("decode(%q) = %+v; re-encoded %q decodes to %+v", data, *m, out, *again)
	}
}

// jsonSame reports whether a and b are the same JSON text once compacted
// (both nil counts as the same).
func jsonSame(a, b []byte) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return false
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameOutcome compares two decodes: the same message, or the same error
// (code and id).
func sameOutcome(m1 *message, e1 *decodeError, m2 *message, e2 *decodeError) bool {
	switch {
	case e1 != nil || e2 != nil:
		return e1 != nil && e2 != nil && e1.Err.Code == e2.Err.Code && e1.ID == e2.ID
	case m1 == nil || m2 == nil:
		return m1 == nil && m2 == nil
	}
	return m1.ID == m2.ID && m1.Method == m2.Method && m1.NoVersion == m2.NoVersion &&
		bytes.Equal(m1.Params, m2.Params) && bytes.Equal(m1.Result, m2.Result)
}
