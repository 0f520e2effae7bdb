package backend

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sandcell/sandcell/oci"
)

// gvPool is a Pool's backend over runsc. A gVisor sandbox is pooled with
// the request's own spec, argv included: `runsc create` boots the sentry
// and gofer but runs nothing of the program until `runsc start`, so /work
// can be filled between the two and the program observes exactly what a
// fresh run's would (the same config.json, the same stdio: a pipe when
// there is standard input, /dev/null when not). The key therefore has the
// argv in it: a language's argv is fixed (python3 -B /work/main.py, the
// compiled program /work/main), so its runs share one key per limits.
type gvPool struct{ g *Runsc }

func (b gvPool) prepareFresh(ctx context.Context, req *oci.Request) (poolMember, error) {
	c, err := b.g.prepare(ctx, req, false)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (b gvPool) prepareAhead(ctx context.Context, e *poolEntry) (poolMember, error) {
	c, err := b.g.prepare(ctx, &e.tmpl, true)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// classify: every request runs pooled but those pooledAlone names, every
// request of a server without cgroups (see NewGVisorPool), and those of a
// rootless server (SingleID): `runsc --rootless` creates its sandbox
// through a user-namespace re-exec of its own, whose process tree the
// holder's wait was not tested on.
func (b gvPool) classify(_ *PoolConfig, req *oci.Request) (string, *poolEntry, bool) {
	if pooledAlone(req) || b.g.lc.cfg.Cgroups == nil || b.g.lc.cfg.SingleID {
		return "", nil, false
	}
	e := &poolEntry{kind: kindCreated, added: make(chan struct{})}
	return e.template(req, req.Args, req.Args), e, true
}

func (b gvPool) bind(c poolMember, _ *poolEntry, req *oci.Request) error {
	if gc, ok := c.(*gvContainer); ok && gc.holderGone() {
		return errStale
	}
	return bindRun(c, req, req.Files)
}

// runscCreateTimeout bounds `runsc create` of a pooled sandbox (about
// 0.1-0.2 s here; a sentry that cannot boot fails well within it).
const runscCreateTimeout = 30 * time.Second

// create lets the holder run `runsc create` (the run's cgroup, limits and
// /work are in place) and waits for its report on ready: "ok" once the
// sandbox is booted, else why not. runsc's own message went to the run's
// stderr, not read yet in a pooled run: a failure quotes its last line.
func (c *gvContainer) create(ctx context.Context, ready *os.File) error {
	if _, err := c.hold.Write([]byte{1}); err != nil {
		return fmt.Errorf("%w: start runsc create: %w", oci.ErrRuntime, err)
	}
	type report struct {
		text string
		err  error
	}
	done := make(chan report, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(ready, 4096))
		done <- report{string(b), err}
	}()
	timer := time.NewTimer(runscCreateTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.text == "ok" {
			return nil
		}
		msg := strings.TrimSpace(r.text)
		if msg == "" {
			msg = "the holder ended without a report"
		}
		if out := c.stderrTail(); out != "" {
			msg += ": " + out
		}
		return fmt.Errorf("%w: runsc create: %s", oci.ErrRuntime, msg)
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("%w: runsc create took more than %s", oci.ErrRuntime, runscCreateTimeout)
	}
}

// stderrTail is the last line of what the run's stderr holds now (read
// for at most 50 ms, at most 4 KiB), for a pooled run not yet bound.
func (c *gvContainer) stderrTail() string {
	if c.errR == nil || c.errR.SetReadDeadline(time.Now().Add(50*time.Millisecond)) != nil {
		return ""
	}
	b := make([]byte, 4096)
	n, _ := io.ReadFull(c.errR, b)
	return lastLine(string(b[:n]))
}

// fillWork fills /work for a request bound to a pooled sandbox.
func (c *gvContainer) fillWork(ctx context.Context, req *oci.Request) error {
	uid, gid := c.g.lc.SandboxIDs()
	fh, err := c.startFill(req, uid, gid, c.cg != nil)
	if err != nil {
		return err
	}
	var target *cgroupTarget
	if fh != nil {
		target = &cgroupTarget{paths: c.cg.GetPaths(), usage: c.usage}
	}
	return c.run.fill(ctx, fh, req, uid, gid, target)
}
