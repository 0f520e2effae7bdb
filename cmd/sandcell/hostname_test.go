package main

import (
	"strings"
	"testing"

	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/rootfs"
)

// TestHostnameResolves: a program that looks its own host up gets an
// answer from the sandbox's files (Python's gethostbyname(gethostname()),
// as Java's InetAddress.getLocalHost and git do), with no network: the
// name the kernel reports is the one the skeleton's /etc/hosts names.
func TestHostnameResolves(t *testing.T) {
	testutil.RequireRoot(t)
	code, out, errOut := cli(t, "", "run", "--lang", "python", "--code",
		"import socket; n = socket.gethostname(); print(n, socket.gethostbyname(n), open('/etc/hostname').read().strip())")
	if want := rootfs.Hostname + " 127.0.1.1 " + rootfs.Hostname + "\n"; code != 0 || out != want {
		t.Errorf("exit %d stdout %q stderr %q, want %q", code, out, strings.TrimSpace(errOut), want)
	}
}
