package service

import (
	"os"
	"path/filepath"
	"testing"
)

// TestNameUser: the layers' "sandbox" at uid/gid 1000 becomes "user"
// with home /home/user (its shell kept); a file without uid 1000 gets the
// line; one that names "user" at another uid is left as it is.
func TestNameUser(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/work:/bin/bash\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "etc/group"), []byte("root:x:0:\nsandbox:x:1000:"), 0o644)
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ids := sandboxIDs{rootUID: uint32(os.Getuid()), rootGID: uint32(os.Getgid())}
	if err := nameUser(root, ids); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/bash\n",
		"etc/group":  "root:x:0:\nuser:x:1000:\n",
	} {
		if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != want {
			t.Errorf("%s: %q, want %q", f, b, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "root")); err != nil || !fi.IsDir() {
		t.Errorf("root's home /root: %v", err)
	}
	if got := string(renameID([]byte("root:x:0:\n"), "user:x:1000:", 2, func([]string) []string { return nil })); got != "root:x:0:\nuser:x:1000:\n" {
		t.Errorf("no uid 1000: %q", got)
	}
	other := "user:x:1001:1001::/home/user:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n"
	if got := string(renameID([]byte(other), "x", 2, func(f []string) []string { return f })); got != other {
		t.Errorf("user at another uid: %q changed", got)
	}
}
