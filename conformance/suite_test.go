package conformance

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestConformanceSuiteFixture runs every server scenario of the official
// conformance suite (active and pending) against the fixture server, which
// has the reference server's tools, resources and prompts, built on
// sandcell's mcp package. Every scenario must pass. No root needed.
func TestConformanceSuiteFixture(t *testing.T) {
	nodeBin(t)
	addr := freeAddr(t)
	cmd := exec.Command(build(t, "fixture"), "--http", addr)
	cmd.Stderr = &testLogWriter{t: t, prefix: "fixture: "}
	startServer(t, cmd, addr)
	for _, suite := range []string{"active", "pending"} {
		t.Run(suite, func(t *testing.T) {
			out, code := runNode(t, 5*time.Minute, "node_modules/@modelcontextprotocol/conformance/dist/index.js",
				"server", "--url", "http://"+addr+"/mcp", "--suite", suite)
			checkSuite(t, out, code)
		})
	}
}

// TestConformanceSuiteSandcell runs the scenarios that need no fixture
// tools against the product binary itself.
func TestConformanceSuiteSandcell(t *testing.T) {
	nodeBin(t)
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	for _, sc := range []string{"server-initialize", "ping", "logging-set-level", "tools-list", "dns-rebinding-protection"} {
		t.Run(sc, func(t *testing.T) {
			out, code := runNode(t, 2*time.Minute, "node_modules/@modelcontextprotocol/conformance/dist/index.js",
				"server", "--url", "http://"+addr+"/mcp", "--scenario", sc)
			checkSuite(t, out, code)
		})
	}
}

// totalRE matches the closing line of a suite run ("Total: 39 passed, 0
// failed") and of one scenario ("Passed: 1/1, 0 failed").
var totalRE = regexp.MustCompile(`(?:Total: (\d+) passed|Passed: (\d+)/\d+), (\d+) failed`)
var scenarioRE = regexp.MustCompile(`(?m)^. ([a-z0-9-]+): (\d+) passed, (\d+) failed`)

func checkSuite(t *testing.T, out string, code int) {
	t.Helper()
	for _, m := range scenarioRE.FindAllStringSubmatch(out, -1) {
		t.Logf("%s: %s passed, %s failed", m[1], m[2], m[3])
	}
	m := totalRE.FindStringSubmatch(out)
	if code != 0 || m == nil || m[3] != "0" || m[1]+m[2] == "0" {
		i := strings.Index(out, "=== SUMMARY ===")
		if i < 0 {
			i = 0
		}
		t.Errorf("conformance: exit %d\n%s", code, out[i:])
	}
}
