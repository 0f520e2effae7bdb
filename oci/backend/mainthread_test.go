package backend_test

import (
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMainThreadReserved: after Init, no goroutine but main's runs on the
// process's main thread. A goroutine that locks its thread and enters a
// container's namespace (libcontainer's mount source thread) and then
// exits ends its thread, except the main thread, which Go never ends: it
// stayed in that mount namespace for the process's life, pinning the
// container's mounts (a live sandbox's disk could then not be detached,
// and was mounted twice by a re-create).
func TestMainThreadReserved(t *testing.T) {
	pid := os.Getpid()
	var mu sync.Mutex
	onMain := 0
	var wg sync.WaitGroup
	for range 2000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // as libcontainer's thread: ended at exit
			if unix.Gettid() == pid {
				mu.Lock()
				onMain++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if onMain > 0 {
		t.Errorf("%d goroutines ran on the main thread", onMain)
	}
}
