package rootfs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// buildTimes are the durations of a layer build's phases, in the order
// they ran: where `rootfs build --all` spends its time (issue #42).
// mmdebstrap's own phases are told apart by its "I: " lines
// (mmdebstrapPhases).
type buildTimes struct {
	names []string
	durs  []time.Duration
}

// add adds d to phase name.
func (b *buildTimes) add(name string, d time.Duration) {
	for i, n := range b.names {
		if n == name {
			b.durs[i] += d
			return
		}
	}
	b.names = append(b.names, name)
	b.durs = append(b.durs, d)
}

// since adds the time since t0 to phase name and returns now.
func (b *buildTimes) since(name string, t0 time.Time) time.Time {
	now := time.Now()
	b.add(name, now.Sub(t0))
	return now
}

// attrs are the phases as log attributes, rounded to 10 ms.
func (b *buildTimes) attrs() []any {
	out := make([]any, 0, len(b.names))
	for i, n := range b.names {
		out = append(out, slog.Duration(n, b.durs[i].Round(10*time.Millisecond)))
	}
	return out
}

// mmdebstrapPhases maps the start of mmdebstrap's info lines (1.x) to the
// phase they begin. The lines before the first are "prepare".
var mmdebstrapPhases = []struct{ prefix, phase string }{
	{"I: running apt-get update", "apt_update"},
	{"I: downloading packages", "download"},
	{"I: extracting archives", "unpack"},
	{"I: running --extract-hook", "list_hook"},
	{"I: cleaning package lists", "cleanup"},
}

// phaseClock is the writer of mmdebstrap's output: it passes the output on
// to w and times the phases its lines begin. Stdout and stderr share it
// (one pipe, one writer goroutine).
type phaseClock struct {
	w       interface{ Write([]byte) (int, error) }
	partial []byte
	phase   string
	start   time.Time
	times   *buildTimes
}

func newPhaseClock(w interface{ Write([]byte) (int, error) }, times *buildTimes) *phaseClock {
	return &phaseClock{w: w, phase: "prepare", start: time.Now(), times: times}
}

func (c *phaseClock) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		line := string(c.partial[:i])
		c.partial = c.partial[i+1:]
		for _, ph := range mmdebstrapPhases {
			if strings.HasPrefix(line, ph.prefix) {
				c.start = c.times.since(c.phase, c.start)
				c.phase = ph.phase
				break
			}
		}
	}
	if len(c.partial) > 4096 {
		c.partial = c.partial[len(c.partial)-4096:] // a line that long is not one of mmdebstrap's
	}
	return n, err
}

// stop ends the last phase (the process exited).
func (c *phaseClock) stop() { c.start = c.times.since(c.phase, c.start) }

// aptCacheDir holds what the builds of a store share of apt's downloads:
// archives/ the .deb files apt fetched (and checked against the suite's
// signed indexes), lists-<key>/ the package indexes of one suite and its
// mirrors. It lies in the store, on the layers' file system, so that
// builds hard-link instead of copying; Prune removes it.
const aptCacheDir = "apt-cache"

// listsMaxAge is how long a build process reuses the package indexes it
// fetched instead of running apt-get update for every layer: within one
// `rootfs build --all` every layer is resolved against the same indexes.
const listsMaxAge = 30 * time.Minute

// aptLists records, per lists directory, when this process fetched it.
var aptLists struct {
	sync.Mutex
	fetched map[string]time.Time
}

// aptCache is the shared apt cache of one build: the directories and
// whether the indexes are reused (then mmdebstrap skips its update).
type aptCache struct {
	debs, lists string
	reuse       bool
}

// aptCacheFor returns the apt cache of a build of suite from mirrors in
// the store at dir, creating its directories.
func aptCacheFor(dir, suite string, mirrors []string) (aptCache, error) {
	sum := sha256.Sum256([]byte(suite + "\x00" + strings.Join(mirrors, "\x00")))
	c := aptCache{
		debs:  filepath.Join(dir, aptCacheDir, "archives"),
		lists: filepath.Join(dir, aptCacheDir, "lists-"+hex.EncodeToString(sum[:8])),
	}
	if err := os.MkdirAll(c.debs, 0o755); err != nil {
		return aptCache{}, err
	}
	aptLists.Lock()
	defer aptLists.Unlock()
	t, ok := aptLists.fetched[c.lists]
	c.reuse = ok && time.Since(t) < listsMaxAge
	return c, nil
}

// fetchedLists records that lists were fetched now; forgetLists that they
// must not be reused (a build that reused them failed).
func fetchedLists(lists string) {
	aptLists.Lock()
	defer aptLists.Unlock()
	if aptLists.fetched == nil {
		aptLists.fetched = map[string]time.Time{}
	}
	aptLists.fetched[lists] = time.Now()
}

func forgetLists(lists string) {
	aptLists.Lock()
	defer aptLists.Unlock()
	delete(aptLists.fetched, lists)
}

// aptCacheInHook is an mmdebstrap --setup-hook (before apt-get update and
// the download): it hard-links the shared .deb files into the target's
// apt archives, where apt takes a file of the right name and size as
// downloaded, and, with $SANDCELL_APT_LISTS_IN set, the reused package
// indexes into its lists. mmdebstrap extracts only the packages apt
// installs (its Pre-Install-Pkgs list), not every file in the archives,
// and its cleanup unlinks the target's links, not the shared files.
const aptCacheInHook = `set -e; mkdir -p "$1"/var/cache/apt/archives "$1"/var/lib/apt/lists; ` +
	`find "$SANDCELL_APT_DEBS" -maxdepth 1 -name '*.deb' -exec ln -f -t "$1"/var/cache/apt/archives/ {} +; ` +
	`if [ -n "$SANDCELL_APT_LISTS_IN" ]; then cp -al "$SANDCELL_APT_LISTS_IN"/. "$1"/var/lib/apt/lists/; fi`

// aptCacheOutHook is an mmdebstrap --extract-hook (before its cleanup): it
// links the .deb files apt fetched into the shared archives (a name there
// already is kept: concurrent builds add the same file) and, with
// $SANDCELL_APT_LISTS_OUT set, copies the indexes apt-get update fetched
// to the shared lists, replacing them in one rename.
const aptCacheOutHook = `for f in "$1"/var/cache/apt/archives/*.deb; do [ -e "$SANDCELL_APT_DEBS/${f##*/}" ] || ln "$f" "$SANDCELL_APT_DEBS/" 2>/dev/null || true; done; ` +
	`if [ -n "$SANDCELL_APT_LISTS_OUT" ]; then set -e; t="$SANDCELL_APT_LISTS_OUT.$$"; rm -rf "$t"; mkdir -p "$t"; ` +
	`cp -al "$1"/var/lib/apt/lists/. "$t"/; rm -rf "$t"/partial "$t"/lock; rm -rf "$SANDCELL_APT_LISTS_OUT"; mv "$t" "$SANDCELL_APT_LISTS_OUT"; fi`
