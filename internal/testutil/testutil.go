// Package testutil holds the helpers that the tests of several packages
// share. Only tests import it.
package testutil

import (
	"fmt"
	"os"
	"testing"
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
