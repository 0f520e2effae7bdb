package rest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
)

// wsDial connects to /api/v2/connect.
func wsDial(t *testing.T, url string) (*websocket.Conn, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/api/v2/connect", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, ctx
}

func wsSend(t *testing.T, ctx context.Context, c *websocket.Conn, v string) {
	t.Helper()
	if err := c.Write(ctx, websocket.MessageText, []byte(v)); err != nil {
		t.Fatal(err)
	}
}

// wsEvents reads events until the server closes; it returns them and the
// close status.
func wsEvents(t *testing.T, ctx context.Context, c *websocket.Conn) ([]map[string]any, websocket.StatusCode, string) {
	t.Helper()
	var out []map[string]any
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return out, ce.Code, ce.Reason
			}
			t.Fatalf("read: %v (events so far %v)", err, out)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("event is not JSON: %q", b)
		}
		out = append(out, m)
	}
}

// TestPistonConnect: an interactive compiled job, as Piston's v2.js
// /connect sends it: runtime, stage compile, exit compile, stage run, the
// program's output as data events, what the client sends as stdin read by
// the program while it runs, exit run, then close 4999 "Job Completed".
func TestPistonConnect(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(ctx context.Context, req executor.Request) api.Result {
		req.Output("compile stdout", "compiled\n")
		req.PhaseDone("compile", api.Phase{Status: api.StatusOK})
		line, err := bufio.NewReader(req.StdinStream).ReadString('\n')
		if err != nil {
			t.Errorf("reading stdin: %v", err)
		}
		req.Output("stdout", "got "+line)
		p := api.Phase{Status: api.StatusError, ExitCode: 2}
		req.PhaseDone("run", p)
		return api.Result{Phase: p, Compile: &api.Phase{Status: api.StatusOK}}
	}
	c, ctx := wsDial(t, ts.URL)
	wsSend(t, ctx, c, `{"type":"init","language":"c","version":"12","files":[{"content":"int main(){}"}],"stdin":"not used\n"}`)
	wsSend(t, ctx, c, `{"type":"data","stream":"stdin","data":"hello\n"}`)
	events, code, reason := wsEvents(t, ctx, c)
	want := []string{
		`{"language":"c","type":"runtime","version":"12.2.0"}`,
		`{"stage":"compile","type":"stage"}`,
		`{"data":"compiled\n","stream":"stdout","type":"data"}`,
		`{"code":0,"signal":null,"stage":"compile","type":"exit"}`,
		`{"stage":"run","type":"stage"}`,
		`{"data":"got hello\n","stream":"stdout","type":"data"}`,
		`{"code":2,"signal":null,"stage":"run","type":"exit"}`,
	}
	var got []string
	for _, e := range events {
		b, _ := json.Marshal(e)
		got = append(got, string(b))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if code != 4999 || reason != "Job Completed" {
		t.Errorf("closed %d %q, want 4999 Job Completed", code, reason)
	}
}

// TestPistonConnectSignal: a signal ends the run; its exit reports SIGKILL.
func TestPistonConnectSignal(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(ctx context.Context, req executor.Request) api.Result {
		req.Output("stdout", "running\n")
		<-ctx.Done() // killed
		p := api.Phase{Status: api.StatusCancelled, ExitCode: 137, Signal: "SIGKILL", Message: "cancelled"}
		req.PhaseDone("run", p)
		return api.Result{Phase: p}
	}
	c, ctx := wsDial(t, ts.URL)
	wsSend(t, ctx, c, `{"type":"init","language":"python","version":"*","files":[{"content":"input()"}]}`)
	_, b, err := c.Read(ctx) // runtime
	if err != nil || !strings.Contains(string(b), "runtime") {
		t.Fatalf("first event %q %v", b, err)
	}
	c.Read(ctx) // stage
	c.Read(ctx) // data: it runs
	wsSend(t, ctx, c, `{"type":"signal","signal":"SIGINT"}`)
	events, code, _ := wsEvents(t, ctx, c)
	if len(events) != 1 || events[0]["type"] != "exit" || events[0]["signal"] != "SIGKILL" || events[0]["code"] != nil || code != 4999 {
		t.Errorf("after the signal: %v, closed %d; want one exit with SIGKILL, 4999", events, code)
	}
}

// TestPistonConnectRefusals: Piston's close codes, and bad init messages
// refused with an error event and 4002 before anything runs.
func TestPistonConnectRefusals(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	release := make(chan struct{})
	fe.run = func(ctx context.Context, req executor.Request) api.Result {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return api.Result{Phase: api.Phase{Status: api.StatusOK}}
	}
	defer close(release)
	init := `{"type":"init","language":"python","version":"*","files":[{"content":"1"}]}`
	for _, tc := range []struct {
		name   string
		msgs   []string
		code   websocket.StatusCode
		errMsg string // the error event's message, for 4002
	}{
		{"no init", nil, 4001, ""},
		{"data first", []string{`{"type":"data","stream":"stdin","data":"x"}`}, 4003, ""},
		{"signal first", []string{`{"type":"signal","signal":"SIGKILL"}`}, 4003, ""},
		{"init twice", []string{init, init}, 4000, ""},
		{"stdout written", []string{init, `{"type":"data","stream":"stdout","data":"x"}`}, 4004, ""},
		{"bad signal", []string{init, `{"type":"signal","signal":"SIGBOGUS"}`}, 4005, ""},
		{"malformed", []string{`{"type":`}, 4002, "not a JSON object"},
		{"unknown language", []string{`{"type":"init","language":"klingon","version":"*","files":[{"content":"1"}]}`}, 4002, "klingon-* runtime is unknown"},
		{"hostile base64", []string{`{"type":"init","language":"python","version":"*","files":[{"content":"1"},{"content":"@@@","encoding":"base64"}]}`}, 4002, "not valid base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fe.count()
			c, ctx := wsDial(t, ts.URL)
			for _, m := range tc.msgs {
				wsSend(t, ctx, c, m)
			}
			events, code, _ := wsEvents(t, ctx, c)
			if code != tc.code {
				t.Errorf("closed %d, want %d (events %v)", code, tc.code, events)
			}
			if tc.errMsg != "" {
				last := events[len(events)-1]
				if msg, _ := last["message"].(string); last["type"] != "error" || !strings.Contains(msg, tc.errMsg) {
					t.Errorf("last event %v, want an error containing %q", last, tc.errMsg)
				}
				if n := fe.count() - before; n != 0 {
					t.Errorf("the executor was called %d times", n)
				}
			}
		})
	}
}

// TestStdinQueue: stdin waits for the program up to its bound, then is
// refused; Close ends the program's reads.
func TestStdinQueue(t *testing.T) {
	q := newStdinQueue(8)
	if err := q.Write([]byte("12345")); err != nil {
		t.Fatal(err)
	}
	if err := q.Write([]byte("6789")); !errors.Is(err, errStdinFull) {
		t.Errorf("9 bytes pending of 8: %v, want errStdinFull", err)
	}
	buf := make([]byte, 3)
	if n, err := q.Read(buf); n != 3 || err != nil || string(buf) != "123" {
		t.Errorf("read %d %v %q", n, err, buf[:n])
	}
	done := make(chan error)
	go func() {
		q.Read(buf)           // "45"
		_, err := q.Read(buf) // blocks until Close
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	q.Close()
	if err := <-done; err == nil {
		t.Error("read after Close: nil error, want EOF")
	}
}

// TestPistonConnectJavaSingleFile: a java job of one file over /connect
// is run as Piston runs it, through the single-file source launcher: its
// first stage is run, never compile.
func TestPistonConnectJavaSingleFile(t *testing.T) {
	ts, fe, _ := newTestServer(t, pistonLanguages(t, map[string]string{"java": "17.0.13+11-2~deb12u1"}))
	fe.run = func(ctx context.Context, req executor.Request) api.Result {
		req.Output("stdout", "OK\n")
		p := api.Phase{Status: api.StatusOK}
		req.PhaseDone("run", p)
		return api.Result{Phase: p}
	}
	c, ctx := wsDial(t, ts.URL)
	wsSend(t, ctx, c, `{"type":"init","language":"java","version":"*","files":[{"name":"test.java","content":"public class HelloWorld {}"}]}`)
	events, code, _ := wsEvents(t, ctx, c)
	var stages []any
	for _, e := range events {
		if e["type"] == "stage" {
			stages = append(stages, e["stage"])
		}
	}
	if len(stages) != 1 || stages[0] != "run" || code != 4999 || fe.last(t).Command == nil {
		t.Errorf("stages %v close %d command %q, want only run, 4999 and the launcher", stages, code, fe.last(t).Command)
	}
}
