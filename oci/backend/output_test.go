package backend_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// What a hostile program prints reaches the model clean: no escape
// sequences, no control characters, valid UTF-8.
func TestOutputCleaned(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		src := `printf '\033[1;31mred\033[0m a\377b \033]8;;http://evil.example/\007link\033]8;;\007\r\n'
printf '\033]52;c;ZWNobyBwd25lZA==\007clip\033[2J\033[H\n' >&2
`
		res := e.run(t, "sh", src, limits.Set{})
		if res.Status != api.StatusOK {
			t.Fatalf("status %s: %s %q", res.Status, res.Message, res.Stderr)
		}
		if want := "red a\uFFFDb link\n"; res.Stdout != want {
			t.Errorf("stdout %q, want %q", res.Stdout, want)
		}
		if want := "clip\n"; res.Stderr != want {
			t.Errorf("stderr %q, want %q", res.Stderr, want)
		}
	})
}

// liveOutput records what OnOutput receives, and anything that comes after
// Wait returned.
type liveOutput struct {
	mu     sync.Mutex
	chunks map[string][]string
	waited bool
	late   []string
}

func (l *liveOutput) on(stream, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waited {
		l.late = append(l.late, stream+": "+text)
		return
	}
	if l.chunks == nil {
		l.chunks = map[string][]string{}
	}
	l.chunks[stream] = append(l.chunks[stream], text)
}

func (l *liveOutput) waitReturned() {
	l.mu.Lock()
	l.waited = true
	l.mu.Unlock()
}

func (l *liveOutput) joined(stream string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.chunks[stream], "")
}

// runLive runs a request with OnOutput and notes when Wait returned.
func (e *testEnv) runLive(t *testing.T, req *oci.Request) (api.Phase, *liveOutput) {
	t.Helper()
	l := &liveOutput{}
	req.OnOutput = l.on
	c, err := e.runtime.Prepare(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(context.Background())
	l.waitReturned()
	return res, l
}

func TestOnOutput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		t.Run("in order, cleaned, joined is the result", func(t *testing.T) {
			// The euro sign is cut between two writes 0.2 s apart.
			src := `printf 'one \033[31mred\033[0m\n'
sleep 0.2
printf 'err1\n' >&2
printf 'two \342\202'
sleep 0.2
printf '\254 euro\r\n'
printf 'err2\n' >&2
`
			res, l := e.runLive(t, newRequest(t, "sh", src, limits.Set{}))
			if res.Status != api.StatusOK {
				t.Fatalf("status %s: %s %q", res.Status, res.Message, res.Stderr)
			}
			if want := "one red\ntwo € euro\n"; res.Stdout != want {
				t.Errorf("stdout %q, want %q", res.Stdout, want)
			}
			if got := l.joined("stdout"); got != res.Stdout {
				t.Errorf("live stdout %q (chunks %q), want the result's %q", got, l.chunks["stdout"], res.Stdout)
			}
			if got := l.joined("stderr"); got != res.Stderr || got != "err1\nerr2\n" {
				t.Errorf("live stderr %q, want the result's %q", got, res.Stderr)
			}
			if n := len(l.chunks["stdout"]); n < 2 {
				t.Errorf("stdout came in %d chunk(s), want it live (writes 0.2 s apart)", n)
			}
		})
		t.Run("nothing after Wait", func(t *testing.T) {
			// A background writer outlives the shell: it is killed with
			// the run, and nothing of it comes after Wait returned.
			src := "(while :; do echo bg; sleep 0.01; done) &\n(while :; do echo bg >&2; sleep 0.01; done) &\nsleep 0.3\n"
			res, l := e.runLive(t, newRequest(t, "sh", src, limits.Set{}))
			if res.Status != api.StatusOK {
				t.Fatalf("status %s: %s", res.Status, res.Message)
			}
			time.Sleep(200 * time.Millisecond)
			l.mu.Lock()
			defer l.mu.Unlock()
			if len(l.late) > 0 {
				t.Errorf("%d live outputs after Wait returned, first %q", len(l.late), l.late[0])
			}
			for _, s := range []string{"stdout", "stderr"} {
				got := strings.Join(l.chunks[s], "")
				want := pick(s == "stdout", res.Stdout, res.Stderr)
				if got != want {
					t.Errorf("live %s: %d bytes, result %d bytes", s, len(got), len(want.(string)))
				}
				if !strings.HasPrefix(got, "bg\n") {
					t.Errorf("live %s starts %q, want bg lines", s, truncateTest(got, 20))
				}
			}
		})
		t.Run("up to the cap", func(t *testing.T) {
			src := "import sys\nsys.stdout.write('x' * 5000)\nsys.stdout.flush()\nsys.stdout.write('y' * 5000)\n"
			res, l := e.runLive(t, newRequest(t, "python", src, limits.Set{OutputBytes: 6000}))
			if res.Status != api.StatusOutputLimit {
				t.Fatalf("status %s, want output_limit", res.Status)
			}
			want := strings.Repeat("x", 5000) + strings.Repeat("y", 1000)
			if got := l.joined("stdout"); got != want {
				t.Errorf("live stdout: %d bytes, want the first 6000 (%d x, %d y)", len(got), strings.Count(got, "x"), strings.Count(got, "y"))
			}
		})
	})
}

func truncateTest(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
