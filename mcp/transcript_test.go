package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the server sections of testdata/transcripts/*.txtar")

// TestTranscripts replays the client lines of each golden transcript
// (testdata/transcripts/*.txtar) on a stream session and compares what the
// server writes, byte for byte, with the file's server section. Refresh
// with `go test ./mcp -run Transcripts -update` and review the diff.
//
// A transcript is a txtar archive: a comment (what it covers, and the bugs
// it pins, "Fixed bugs:"), a "client" file of messages, one per line, and a
// "server" file of the expected output. After each client line that
// expects an answer (anything but a notification) the replay waits for
// the server's response before sending the next.
func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/transcripts/*.txtar")
	if len(files) == 0 {
		t.Fatal("no transcripts")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			comment, sections := parseTxtar(string(data))
			got := replay(t, sections["client"])
			if *update {
				out := comment + "-- client --\n" + sections["client"] + "-- server --\n" + got
				if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != sections["server"] {
				t.Errorf("server output differs from %s (run with -update and review the diff)\ngot:\n%s\nwant:\n%s", file, got, sections["server"])
			}
		})
	}
}

// parseTxtar splits a txtar archive into its comment and files.
func parseTxtar(s string) (string, map[string]string) {
	files := map[string]string{}
	var comment strings.Builder
	name := ""
	for _, line := range strings.SplitAfter(s, "\n") {
		trimmed := strings.TrimRight(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			name = strings.TrimSpace(trimmed[3 : len(trimmed)-3])
			files[name] = ""
			continue
		}
		if name == "" {
			comment.WriteString(line)
		} else {
			files[name] += line
		}
	}
	return comment.String(), files
}

func replay(t *testing.T, client string) string {
	t.Helper()
	s, _ := testServer(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.ServeStream(ctx, inR, outW)
		outW.Close()
		close(done)
	}()
	defer func() { cancel(); inW.Close(); <-done }()
	lines := make(chan string, 100)
	go func() {
		br := bufio.NewReader(outR)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimRight(client, "\n"), "\n") {
		if line == "" {
			continue
		}
		io.WriteString(inW, line+"\n")
		var m map[string]json.RawMessage
		isNotification := json.Unmarshal([]byte(line), &m) == nil && m["method"] != nil && m["id"] == nil
		if isNotification {
			continue
		}
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("server closed the stream after %q", line)
				}
				out.WriteString(l)
				var resp map[string]json.RawMessage
				if json.Unmarshal([]byte(l), &resp) == nil && resp["method"] == nil {
					goto next
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no response to %q", line)
			}
		}
	next:
	}
	return out.String()
}
