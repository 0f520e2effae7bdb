package oci

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

func TestVerdict(t *testing.T) {
	l := limits.Defaults()
	for _, tc := range []struct {
		name string
		e    ExitInfo
		stop StopReason
		u    limits.Usage
		want api.Status
	}{
		{"clean exit", ExitInfo{Code: 0}, StopNone, limits.Usage{}, api.StatusOK},
		{"non-zero exit", ExitInfo{Code: 3}, StopNone, limits.Usage{}, api.StatusError},
		{"own signal", ExitInfo{Code: 139, Signal: syscall.SIGSEGV}, StopNone, limits.Usage{}, api.StatusError},
		{"oom under a shell that exits 0", ExitInfo{Code: 0}, StopNone, limits.Usage{OOMKills: 1}, api.StatusMemoryLimit},
		{"oom of init", ExitInfo{Code: 137, Signal: syscall.SIGKILL}, StopNone, limits.Usage{OOMKills: 1}, api.StatusMemoryLimit},
		{"wall clock", ExitInfo{Code: 137, Signal: syscall.SIGKILL}, StopTimeout, limits.Usage{}, api.StatusTimeout},
		{"cpu watchdog (gVisor)", ExitInfo{Code: 137, Signal: syscall.SIGKILL}, StopCPUTime, limits.Usage{}, api.StatusTimeout},
		{"cpu soft limit", ExitInfo{Code: 152, Signal: syscall.SIGXCPU}, StopNone, limits.Usage{}, api.StatusTimeout},
		{"cpu hard limit", ExitInfo{Code: 137, Signal: syscall.SIGKILL}, StopNone, limits.Usage{CPUTime: l.CPUTime + time.Millisecond}, api.StatusTimeout},
		{"sigkill below cpu limit", ExitInfo{Code: 137, Signal: syscall.SIGKILL}, StopNone, limits.Usage{CPUTime: time.Millisecond}, api.StatusError},
		{"output cap beats oom", ExitInfo{Signal: syscall.SIGKILL}, StopOutput, limits.Usage{OOMKills: 1}, api.StatusOutputLimit},
		{"cancel beats everything", ExitInfo{Signal: syscall.SIGKILL}, StopCancelled, limits.Usage{OOMKills: 1}, api.StatusCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := ExitVerdict(tc.e, tc.stop, tc.u, l)
			if got != tc.want {
				t.Errorf("verdict(%+v, %v, %+v) = %s, want %s", tc.e, tc.stop, tc.u, got, tc.want)
			}
			// Every status but ok says why (issue #17: status error
			// came with no message).
			if got != api.StatusOK && msg == "" {
				t.Errorf("status %s without a message", got)
			}
		})
	}
}

func TestCaptureCapsAndSignals(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	overs := 0
	c := StartCapture(r, 10, func() { overs++ }, nil)
	w.Write([]byte("0123456789")) // exactly the cap: not over
	w.Write([]byte("abc"))
	w.Write([]byte("def"))
	w.Close()
	b, trunc := c.Wait()
	if string(b) != "0123456789" || !trunc || overs != 1 {
		t.Errorf("got %q truncated=%v overs=%d, want the first 10 bytes, truncated, one call", b, trunc, overs)
	}

	r, w, _ = os.Pipe()
	c = StartCapture(r, 10, func() { t.Error("over called for output within the cap") }, nil)
	w.Write([]byte("0123456789"))
	w.Close()
	if b, trunc := c.Wait(); string(b) != "0123456789" || trunc {
		t.Errorf("got %q truncated=%v at exactly the cap", b, trunc)
	}
}

// TestKernelVerdictMessages (issue #17): every status of a cell but ok
// says why, whatever the outcome. Before, a cell that raised an
// exception was status error with an empty message.
func TestKernelVerdictMessages(t *testing.T) {
	c := KernelCell{Timeout: time.Second, CPUTime: time.Second, Grace: time.Second, OutputBytes: 1 << 20}
	var outcomes []KernelOutcome
	for _, stop := range []string{"", CellCancelled, CellOutput, CellTimeout, CellCPUTime} {
		for _, died := range []bool{false, true} {
			for _, oom := range []uint64{0, 1} {
				for _, err := range []error{nil, os.ErrClosed} {
					outcomes = append(outcomes, KernelOutcome{Stop: stop, Died: died, Killed: died, OOMKills: oom, Err: err})
				}
			}
		}
	}
	for _, o := range outcomes {
		for _, replyErr := range []bool{false, true} {
			st, msg, _ := KernelVerdict(o, c, 64<<20, replyErr)
			if st != api.StatusOK && msg == "" {
				t.Errorf("%+v, reply error %v: status %s without a message", o, replyErr, st)
			}
		}
	}
}
