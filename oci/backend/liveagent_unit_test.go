package backend

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci/backend/zygote"
)

// TestLiveAgentUntrusted: what a live sandbox's init reports is untrusted
// (it runs inside the sandbox): a report of the wrong size, of an unknown
// kind, of a start nobody asked for, or carrying fds, ends the sandbox
// (the violation callback) instead of being believed.
func TestLiveAgentUntrusted(t *testing.T) {
	report := func(kind uint32, pid int32, n int) []byte {
		b := make([]byte, n)
		if n >= 12 {
			binary.NativeEndian.PutUint32(b[0:], kind)
			binary.NativeEndian.PutUint32(b[4:], uint32(pid))
		}
		return b
	}
	for _, c := range []struct {
		name string
		msg  []byte
		fd   bool
		want string
	}{
		{"short", report(zygote.AgentExited, 5, zygote.AgentReportSize-1), false, "bytes"},
		{"long", report(zygote.AgentExited, 5, 4096), false, "bytes"},
		{"kind", report(99, 5, zygote.AgentReportSize), false, "kind"},
		{"unasked start", report(zygote.AgentSpawned, 5, zygote.AgentReportSize), false, "nobody asked"},
		{"unasked failure", report(zygote.AgentFailed, 5, zygote.AgentReportSize), false, "nobody asked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			init := os.NewFile(uintptr(fds[1]), "init")
			defer init.Close()
			if err := unix.SetNonblock(fds[0], true); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			a := newLiveAgent(os.NewFile(uintptr(fds[0]), "agent"), func(err error) { got <- err })
			defer a.close()
			if err := unix.Sendmsg(fds[1], c.msg, nil, nil, 0); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if !strings.Contains(err.Error(), c.want) {
					t.Errorf("violation %q, want %q", err, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no violation")
			}
			select {
			case <-a.dead:
			case <-time.After(5 * time.Second):
				t.Fatal("the agent reads on after a violation")
			}
		})
	}
}
