package backend

import (
	"fmt"
	"strings"
	"time"
)

// demand is how much a pool key is asked for: how many of its runs are
// alive at once, recently. A pool keeps as many idle containers of a key
// as the key recently had runs at once (its target), up to the pool's
// size, and none once the key was not asked for during the idle period.
//
// Time is cut into windows of the idle period: the target is the most
// runs at once in the current or the previous window. A key asked for
// only once in that time has target 0: a one-shot caller (sandcell run)
// never pays for a container it does not use.
//
// demand is not safe for concurrent use (Pool holds its lock).
type demand struct {
	inUse    int       // runs of the key alive now
	peak     int       // most runs at once in the current window
	prevPeak int       // the same in the previous window
	asked    int       // requests in the current and previous window
	prevAsk  int       // requests in the previous window
	since    time.Time // start of the current window
	last     time.Time // the last request
}

// acquire counts a request that starts a run of the key.
func (d *demand) acquire(now time.Time, idle time.Duration) {
	d.roll(now, idle)
	d.inUse++
	d.asked++
	d.peak = max(d.peak, d.inUse)
	d.last = now
}

// release counts the end of a run of the key.
func (d *demand) release(now time.Time, idle time.Duration) {
	d.roll(now, idle)
	if d.inUse > 0 {
		d.inUse--
	}
}

// roll starts a new window when the current one is over.
func (d *demand) roll(now time.Time, idle time.Duration) {
	if d.since.IsZero() {
		d.since = now
		return
	}
	switch age := now.Sub(d.since); {
	case age < idle:
		return
	case age < 2*idle: // the next window
		d.prevPeak, d.prevAsk = d.peak, d.asked
	default: // windows without a request in between
		d.prevPeak, d.prevAsk = 0, 0
	}
	d.peak, d.asked, d.since = d.inUse, 0, now
}

// target is how many idle containers the key should have: 0 when it was
// not asked for during the last idle period or only once in the last two
// windows, else the most runs at once recently, at most size.
func (d *demand) target(now time.Time, idle time.Duration, size int) int {
	d.roll(now, idle)
	if d.last.IsZero() || now.Sub(d.last) >= idle || d.asked+d.prevAsk < 2 {
		return 0
	}
	return min(size, max(d.peak, d.prevPeak, 1))
}

// active says whether the key still needs its bookkeeping: runs alive or
// asked for within the idle period.
func (d *demand) active(now time.Time, idle time.Duration) bool {
	return d.inUse > 0 || (!d.last.IsZero() && now.Sub(d.last) < idle)
}

// launcherScript is the init of a pooled container prepared for any
// program (the base layer's static busybox runs it: "/bin/busybox sh -c
// SCRIPT"). It reads one line from fd 3, the command that launcherLine
// encoded, closes fd 3 and execs the command with builtins only: no fork,
// so the program is the container's init (pid 1) as in a fresh run.
// Nothing on the line was interpreted before the eval: every word is
// single-quoted. A pipe closed without a line (the container was destroyed
// unused) ends the launcher with 125.
const launcherScript = "n='\n';IFS= read -r c <&3||exit 125;exec 3<&-;eval \"exec $c\""

// maxLauncherLine bounds the command a launcher takes: the shell's read
// takes one byte per system call, so larger commands run fresh.
const maxLauncherLine = 64 << 10

// launcherLine encodes argv for launcherScript: each argument in single
// quotes (a quote as '\”, a newline as the launcher's $n), on one line.
func launcherLine(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('\'')
		for _, r := range a {
			switch r {
			case '\'':
				b.WriteString(`'\''`)
			case '\n':
				b.WriteString(`'"$n"'`)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('\'')
	}
	b.WriteByte('\n')
	return b.String()
}

// launcherEnv is the environment libcontainer's init gives a program
// (runc's prepareEnv): each key once, with its last value, in the order of
// the last occurrences. ok is false when runc would change it further (an
// empty HOME is replaced from /etc/passwd), or an entry is not KEY=VALUE.
func launcherEnv(env []string) (out []string, ok bool) {
	seen := make(map[string]bool, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		k, v, found := strings.Cut(env[i], "=")
		if !found || k == "" {
			return nil, false
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		if k == "HOME" && v == "" {
			return nil, false
		}
		out = append(out, env[i])
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, seen["HOME"]
}

// poolKind is how a pooled container waits for its program.
type poolKind int

const (
	// kindLauncher: busybox runs launcherScript and execs the program.
	kindLauncher poolKind = iota + 1
	// kindScript: the interpreter itself runs, started with the
	// request's argv exactly, blocked opening its script, a FIFO in /work
	// (see PoolConfig.Scripts).
	kindScript
	// kindCreated: a gVisor sandbox created with the request's own spec
	// (`runsc create`), started at Start; nothing of the program ran.
	kindCreated
)

func (k poolKind) String() string {
	switch k {
	case kindLauncher:
		return "prepared"
	case kindScript:
		return "interpreter"
	case kindCreated:
		return "created"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}
