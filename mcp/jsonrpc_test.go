package mcp

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	for _, tc := range []struct {
		name, in string
		code     int    // 0: decodes
		id       string // the id echoed in the error, or of the message
		method   string
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, 0, "1", "ping"},
		{"string id", `{"jsonrpc":"2.0","id":"a\u0062","method":"ping"}`, 0, `"ab"`, "ping"},
		{"huge integer id echoed exactly", `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`, 0, "123456789012345678901234567890", "ping"},
		{"negative id", `{"jsonrpc":"2.0","id":-7,"method":"ping"}`, 0, "-7", "ping"},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, 0, "", "notifications/initialized"},
		{"legacy without jsonrpc", `{"method":"list_tools","params":{},"id":1}`, 0, "1", "list_tools"},
		{"response", `{"jsonrpc":"2.0","id":"s-1","result":{}}`, 0, `"s-1"`, ""},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, CodeInvalidRequest, "", ""},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, CodeInvalidRequest, "", ""},
		{"exponent id", `{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, CodeInvalidRequest, "", ""},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, CodeInvalidRequest, "", ""},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, CodeInvalidRequest, "", ""},
		{"oversized id", `{"jsonrpc":"2.0","id":"` + strings.Repeat("x", 2000) + `","method":"ping"}`, CodeInvalidRequest, "", ""},
		{"wrong version", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, CodeInvalidRequest, "1", ""},
		{"numeric method", `{"jsonrpc":"2.0","id":1,"method":5}`, CodeInvalidRequest, "1", ""},
		{"empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, CodeInvalidRequest, "1", ""},
		{"array params", `{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}`, CodeInvalidParams, "1", ""},
		{"string params", `{"jsonrpc":"2.0","id":2,"method":"ping","params":"x"}`, CodeInvalidParams, "2", ""},
		{"method and result", `{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}`, CodeInvalidRequest, "1", ""},
		{"result and error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`, CodeInvalidRequest, "1", ""},
		{"response without id", `{"jsonrpc":"2.0","result":{}}`, CodeInvalidRequest, "", ""},
		{"no method no result", `{"jsonrpc":"2.0","id":1}`, CodeInvalidRequest, "1", ""},
		{"field names are case-sensitive", `{"jsonrpc":"2.0","ID":1,"Method":"ping"}`, CodeInvalidRequest, "", ""},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, CodeInvalidRequest, "", ""},
		{"empty batch", `[]`, CodeInvalidRequest, "", ""},
		{"not an object", `42`, CodeInvalidRequest, "", ""},
		{"string", `"ping"`, CodeInvalidRequest, "", ""},
		{"truncated", `{"jsonrpc":"2.0","id":1,"method":"pi`, CodeParseError, "", ""},
		{"garbage", `hello`, CodeParseError, "", ""},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffing\"}", CodeParseError, "", ""},
		{"deep nesting", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + deep + `}}`, CodeParseError, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, derr := decode([]byte(tc.in))
			if tc.code == 0 {
				if derr != nil {
					t.Fatalf("decode(%.60q) failed: %v", tc.in, derr.Err)
				}
				if m.ID.String() != tc.id || m.Method != tc.method {
					t.Errorf("decode(%.60q) = id %s method %q, want id %s method %q", tc.in, m.ID, m.Method, tc.id, tc.method)
				}
				return
			}
			if derr == nil {
				t.Fatalf("decode(%.60q) succeeded, want error %d", tc.in, tc.code)
			}
			if derr.Err.Code != tc.code {
				t.Errorf("decode(%.60q) error %d (%s), want %d", tc.in, derr.Err.Code, derr.Err.Message, tc.code)
			}
			if derr.ID.String() != tc.id {
				t.Errorf("decode(%.60q) error id %q, want %q", tc.in, derr.ID.String(), tc.id)
			}
		})
	}
}

func TestNotificationWithBadParamsIsIgnored(t *testing.T) {
	m, derr := decode([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}`))
	if m != nil || derr != nil {
		t.Errorf("got %v, %v; want nothing to answer", m, derr)
	}
}

func TestEncodedMessagesAreOneLine(t *testing.T) {
	b, err := encodeResult(IntID(1), map[string]string{"text": "a\nb\r\u2028<&>"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(string(b), "\n\r") {
		t.Errorf("encoded message spans lines: %q", b)
	}
}
