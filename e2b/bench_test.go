package e2b

import (
	"io"
	"testing"
)

// BenchmarkHandlerCreateToFirstCommand is one sandbox's life through the
// handler with a Go client (create, Start `node -v` to its end, kill) over
// the fake service: the drop-in's own cost, without the SDK's.
func BenchmarkHandlerCreateToFirstCommand(b *testing.B) {
	e := newEnv(b)
	defer e.srv.Close()
	for b.Loop() {
		s := e.create("base")
		resp := e.openStream(s, "process.Process/Start", runArgs("node -v"), nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		e.api("DELETE", "/sandboxes/"+s.SandboxID, nil)
	}
}
