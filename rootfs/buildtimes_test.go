package rootfs

import (
	"strings"
	"testing"
	"time"
)

// TestPhaseClock: mmdebstrap's info lines, written in pieces, split its
// run into the phases a layer build's log reports (issue #42: where
// `rootfs build --all` spends its time).
func TestPhaseClock(t *testing.T) {
	var out tailBuffer
	out.max = 1 << 10
	var times buildTimes
	c := newPhaseClock(&out, &times)
	lines := []string{
		"I: finding correct signed-by value...\n",
		"I: running apt-get update...\n",
		"Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\n",
		"I: downloading packages with apt...\n",
		"I: extracting archives...\n",
		"I: running --extract-hook in shell: sh -c 'x' exec /tmp/root\n",
		"I: cleaning package lists and apt cache...\n",
		"I: success in 8.7 seconds\n",
	}
	for _, l := range lines {
		// Two writes per line: a line split between reads still counts.
		h := len(l) / 2
		c.Write([]byte(l[:h]))
		time.Sleep(time.Millisecond)
		c.Write([]byte(l[h:]))
	}
	c.stop()
	if got, want := strings.Join(times.names, " "), "prepare apt_update download unpack list_hook cleanup"; got != want {
		t.Errorf("phases %q, want %q", got, want)
	}
	for i, d := range times.durs {
		if d <= 0 {
			t.Errorf("phase %s: %v", times.names[i], d)
		}
	}
	if out.String() != strings.Join(lines, "") {
		t.Errorf("output passed on: %q", out.String())
	}
	if len(times.attrs()) != len(times.names) {
		t.Errorf("attrs %v", times.attrs())
	}
}

// TestWithoutProvides: a lower package's Provides (and its continuation
// lines) is left out of the status apt is given, the other fields kept.
func TestWithoutProvides(t *testing.T) {
	in := "Package: openjdk-17-jre-headless\nVersion: 17\nProvides: java-runtime-headless,\n java8-runtime-headless\nDepends: libc6\nDescription: x\n more"
	want := "Package: openjdk-17-jre-headless\nVersion: 17\nDepends: libc6\nDescription: x\n more"
	if got := string(withoutProvides([]byte(in))); got != want {
		t.Errorf("withoutProvides:\n%s\nwant\n%s", got, want)
	}
}
