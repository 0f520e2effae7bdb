package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCheckServeKeys: `config check` refuses what serve would
// refuse, for serve's keys too (a negative drain-timeout passed the check
// and failed only when the server started), and passes a good file.
func TestConfigCheckServeKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.toml", "drain-timeout = \"-5s\"\n")
	if code, _, errOut := cli(t, "", "config", "check", bad); code != 1 || !strings.Contains(errOut, "--drain-timeout -5s is negative") {
		t.Errorf("config check of a negative drain-timeout: exit %d, stderr %q", code, errOut)
	}
	good := write("good.toml", "drain-timeout = \"30s\"\n")
	if code, out, errOut := cli(t, "", "config", "check", good); code != 0 || !strings.Contains(out, "ok (1 settings)") {
		t.Errorf("config check of a good file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
