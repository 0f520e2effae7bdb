package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The seed's three client examples (../shared/docs/seed.md), as written,
// against the real server: python over HTTP, js over TCP lines, go from the
// python client. An unknown language gets a clear error naming the known ones.

// TestSeedHTTPPost is the first example: POST /mcp with call_tool, no
// "jsonrpc", no session, answered with the flat result.
func TestSeedHTTPPost(t *testing.T) {
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	body := `{
  "method": "call_tool",
  "params": {
    "tool": "execute_code",
    "arguments": {
      "language": "python",
      "source": "print('Hello, MCP!')"
    }
  },
  "id": 1
}`
	req, _ := http.NewRequest("POST", "http://"+addr+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      int            `json:"id"`
		Result  map[string]any `json:"result"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP %d %s", resp.StatusCode, b)
	}
	if got.JSONRPC != "2.0" || got.ID != 1 || got.Result["stdout"] != "Hello, MCP!\n" || got.Result["stderr"] != "" || got.Result["exit_code"] != 0.0 || got.Result["execution_time_ms"] == nil {
		t.Errorf("answer %s", b)
	}
}

// TestSeedTCPLines is the second example: `echo LINE | nc localhost 3000`,
// one connection per line, raw JSON lines.
func TestSeedTCPLines(t *testing.T) {
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--tcp", addr), addr)
	ncLine := func(line string) map[string]any {
		t.Helper()
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(60 * time.Second))
		io.WriteString(conn, line+"\n")  // echo adds the newline
		conn.(*net.TCPConn).CloseWrite() // nc at end of its input
		sc := bufio.NewScanner(conn)
		sc.Buffer(nil, 1<<20)
		lines, err := readLines(sc, 1)
		if err != nil || len(lines) != 1 {
			t.Fatalf("%s: %v %v", line, lines, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
			t.Fatalf("not JSON: %s", lines[0])
		}
		return m
	}
	m := ncLine(`{"method":"list_tools","params":{},"id":1}`)
	if b, _ := json.Marshal(m); !strings.Contains(string(b), `"name":"execute_code"`) {
		t.Errorf("list_tools: %s", b)
	}
	m = ncLine(`{"method":"call_tool","params":{"tool":"execute_code","arguments":{"language":"js","source":"console.log(2+2);"}},"id":2}`)
	r, _ := m["result"].(map[string]any)
	if r["stdout"] != "4\n" || r["stderr"] != "" || r["exit_code"] != 0.0 {
		t.Errorf("call_tool with js: %v", m)
	}
	m = ncLine(`{"method":"call_tool","params":{"tool":"execute_code","arguments":{"language":"klingon","source":"x"}},"id":3}`)
	if b, _ := json.Marshal(m); !strings.Contains(string(b), "python") || m["error"] == nil {
		t.Errorf("call_tool with klingon: %s, want an error naming the languages", b)
	}
	// With the real nc, when the host has one.
	if nc, err := exec.LookPath("nc"); err == nil {
		host, port, _ := net.SplitHostPort(addr)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", `echo '{"method":"list_tools","params":{},"id":1}' | `+nc+` -q 2 `+host+` `+port+` || echo '{"method":"list_tools","params":{},"id":1}' | `+nc+` -N `+host+` `+port)
		out, _ := cmd.Output()
		if !strings.Contains(string(out), "execute_code") {
			t.Errorf("nc: %q", out)
		}
	}
}

// TestSeedPythonClient is the third example, the python client, run by
// python3 (requests if installed, else urllib with the same body and
// headers).
func TestSeedPythonClient(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 not found")
	}
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "testdata/seed_client.py", "http://"+addr+"/mcp").CombinedOutput()
	if err != nil || string(out) != "MCP Go\n\n" {
		t.Errorf("python client: %v, output %q", err, out)
	}
}
