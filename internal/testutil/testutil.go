// Package testutil holds the helpers that the tests of several packages
// share. Only tests import it.
package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Require skips the test when ok is false, except in CI (CI=true): CI runs
// as root with every tool installed, so there a missing privilege or tool
// is a failure, never a silent skip.
func Require(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true, so this test must run)", msg)
	}
	t.Skip(msg)
}

// RequireRoot is Require for tests that need root.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root")
}

// WaitFor polls cond until it holds, and fails the test after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// MountsBelow lists the mount points strictly below dir, as this thread
// sees them: libcontainer leaves some threads of a process that runs
// containers (the main thread among them) in a container's mount
// namespace, so /proc/self/mountinfo may be a container's.
func MountsBelow(t testing.TB, dir string) []string {
	t.Helper()
	runtime.LockOSThread()
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			out = append(out, f[4])
		}
	}
	return out
}
