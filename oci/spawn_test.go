package oci_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// onDyingThread calls f on a goroutine locked to a thread that is not the
// main thread and never unlocked, so that the thread ends when f returns:
// what libcontainer does with the threads it starts containers from.
func onDyingThread(f func()) {
	done := make(chan struct{})
	var try func()
	try = func() {
		runtime.LockOSThread()
		if syscall.Gettid() == os.Getpid() {
			// The main thread is not ended with its goroutine: try
			// another one.
			runtime.UnlockOSThread()
			go try()
			return
		}
		defer close(done)
		f()
	}
	go try()
	<-done
}

// TestGVisorRunOutlivesItsPreparingThread (issue #17): a gVisor run's
// runsc is started with a parent-death signal, which the kernel sends when
// the forking *thread* exits. Prepared on a thread that then ends (as a
// warm pool's background container starts end theirs), the run was
// SIGKILLed: status error, exit 137, no message. It must run to the end.
func TestGVisorRunOutlivesItsPreparingThread(t *testing.T) {
	e := newGVisorEnv(t)
	req := newRequest(t, "sh", "sleep 0.3; echo alive", limits.Set{})
	ctx := context.Background()
	var (
		c   oci.Container
		err error
	)
	onDyingThread(func() { c, err = e.runtime.Prepare(ctx, req) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(ctx)
	if res.Status != api.StatusOK || !strings.Contains(res.Stdout, "alive") {
		t.Errorf("run prepared on a thread that ended: status %s, exit %d, signal %q, message %q, stdout %q, stderr %q",
			res.Status, res.ExitCode, res.Signal, res.Message, res.Stdout, res.Stderr)
	}
}
