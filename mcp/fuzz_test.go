package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

// instantExecutor answers every run at once (the fuzzer must not block).
type instantExecutor struct{}

func (instantExecutor) Execute(_ context.Context, req api.Request) (api.Result, error) {
	return api.Result{Phase: api.Phase{Stdout: string(req.Source), Status: "ok"}}, nil
}

// FuzzDispatch feeds arbitrary input to a stream session, as one line or
// several, and checks the invariant of the package: no panic, the server
// returns, and everything it writes is one well-formed JSON-RPC 2.0
// message per line. The seed corpus is in testdata/fuzz/FuzzDispatch; CI
// runs it (and a short -fuzz run).
func FuzzDispatch(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"sh","source":"x"}}}`,
		`{"method":"call_tool","params":{"tool":"execute_code","arguments":{"language":"sh","source":"echo"}},"id":2}`,
		`{"jsonrpc":"2.0","id":"x","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":3,"result":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
		"\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	s := NewServer(&Options{MaxMessageBytes: 1 << 16})
	AddExecuteCode(s, instantExecutor{}, &ExecuteToolOptions{Languages: []string{"sh"}})
	init := []byte(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"f","version":"1"}}}` + "\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, append(append([]byte{}, init...), data...)} {
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := s.ServeStream(ctx, bytes.NewReader(in), &out)
			cancel()
			if err != nil {
				t.Fatalf("ServeStream(%q): %v", in, err)
			}
			sc := bufio.NewScanner(&out)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var m struct {
					JSONRPC string          `json:"jsonrpc"`
					ID      json.RawMessage `json:"id"`
					Method  string          `json:"method"`
					Result  json.RawMessage `json:"result"`
					Error   *Error          `json:"error"`
				}
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Fatalf("input %q: output line is not JSON: %q", in, sc.Bytes())
				}
				if m.JSONRPC != "2.0" {
					t.Fatalf("input %q: output without jsonrpc 2.0: %q", in, sc.Bytes())
				}
				if m.Method == "" && (m.Result == nil) == (m.Error == nil) {
					t.Fatalf("input %q: a response needs exactly one of result and error: %q", in, sc.Bytes())
				}
			}
		}
	})
}
