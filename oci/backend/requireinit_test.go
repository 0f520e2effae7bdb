package backend

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/seccomp"
)

// TestNoRuntimeWithoutInit: in a binary that never called Init, no runtime
// opens and no helper is re-executed (each would run the binary's main: a
// test binary re-ran its tests, which started a reaper, which re-ran them).
func TestNoRuntimeWithoutInit(t *testing.T) {
	if !initCalled.Load() {
		t.Fatal("this test binary did not call Init (main_test.go does)")
	}
	initCalled.Store(false)
	defer initCalled.Store(true)
	filter, err := seccomp.Profile()
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewLibcontainer(LibcontainerConfig{StateDir: t.TempDir(), Seccomp: filter})
	if err == nil {
		r.Close()
		t.Fatal("NewLibcontainer opened a runtime in a binary without Init")
	}
	if !errors.Is(err, oci.ErrRuntime) || !strings.Contains(err.Error(), "backend.Init") {
		t.Errorf("error %v: want oci.ErrRuntime naming backend.Init", err)
	}
	if _, err := helperExe(); err == nil || !strings.Contains(err.Error(), "backend.Init") {
		t.Errorf("helperExe without Init: %v, want an error naming backend.Init", err)
	}
}
