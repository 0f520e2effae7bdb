package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// compareBareHost measures, per language and at concurrency 1 and
// concurrency (if more than 1), the throughput of the batch's programs
// through sandcell (compile and run phases in fresh sandboxes, as
// `sandcell batch` runs them) and on the bare host: the same argv of the
// same layer's binaries, chrooted into a writable overlay of the
// language's root, without namespaces, cgroups or seccomp. Both sides run
// every program; it prints a Markdown table.
func compareBareHost(ctx context.Context, env *cliEnv, a *app, jobs []batchJob, concurrency int) int {
	byLang := map[string][]batchJob{}
	var order []string
	for _, j := range jobs {
		if j.err != nil {
			return env.fail(fmt.Errorf("line %d (%s): %w", j.line, j.id, j.err))
		}
		if _, ok := byLang[j.req.Language]; !ok {
			order = append(order, j.req.Language)
		}
		byLang[j.req.Language] = append(byLang[j.req.Language], j)
	}
	levels := []int{1}
	if concurrency > 1 {
		levels = append(levels, concurrency)
	}
	fmt.Fprintln(env.stdout, "| language | programs | concurrency | sandcell passed | sandcell wall s | sandcell programs/s | bare passed | bare wall s | bare programs/s | sandcell / bare throughput |")
	fmt.Fprintln(env.stdout, "|---|---|---|---|---|---|---|---|---|---|")
	for _, name := range order {
		lang, err := rootfs.Lookup(name)
		if err != nil {
			return env.fail(err)
		}
		root, err := a.root(ctx, lang)
		if err != nil {
			return env.fail(err)
		}
		js := byLang[name]
		for _, c := range levels {
			b := &batch{exec: a.execute, concurrency: c, log: env.log}
			sPass, sWall := timeBatch(ctx, c, js, func(ctx context.Context, _ int, j batchJob) bool {
				o := b.one(ctx, j)
				if o.Verdict != verdictAccepted {
					var res oci.Result
					if o.Result != nil {
						res = *o.Result
					}
					env.log.Warn("sandcell run did not pass", "id", j.id, "verdict", o.Verdict, "error", o.Error,
						"status", res.Status, "exit_code", res.ExitCode, "stdout", clip(res.Stdout), "stderr", clip(res.Stderr))
				}
				return o.Verdict == verdictAccepted
			})
			bare, err := newBareRoots(root, c)
			if err != nil {
				return env.fail(err)
			}
			bPass, bWall := timeBatch(ctx, c, js, func(ctx context.Context, slot int, j batchJob) bool {
				ok, err := bare.run(ctx, slot, lang, j)
				if err != nil || !ok {
					env.log.Warn("bare run did not pass", "id", j.id, "err", err)
				}
				return ok
			})
			if err := bare.close(); err != nil {
				return env.fail(err)
			}
			if ctx.Err() != nil {
				return env.fail(ctx.Err())
			}
			n := float64(len(js))
			fmt.Fprintf(env.stdout, "| %s | %d | %d | %d | %.1f | %.2f | %d | %.1f | %.2f | %.2fx |\n", name, len(js), c,
				sPass, sWall.Seconds(), n/sWall.Seconds(), bPass, bWall.Seconds(), n/bWall.Seconds(), bWall.Seconds()/sWall.Seconds())
		}
	}
	return 0
}

// timeBatch runs fn over jobs, c at a time (each worker has a slot number),
// and returns how many passed and the wall time.
func timeBatch(ctx context.Context, c int, jobs []batchJob, fn func(context.Context, int, batchJob) bool) (int, time.Duration) {
	start := time.Now()
	queue := make(chan batchJob)
	var mu sync.Mutex
	passed := 0
	var wg sync.WaitGroup
	for slot := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				if fn(ctx, slot, j) {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			}
		}()
	}
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	wg.Wait()
	return passed, time.Since(start)
}

// bareRoots are writable copies-on-write of a language's root for bare
// runs, one per worker: an overlay on a tmpfs (as the sandbox's /work and
// /tmp are tmpfs), with the host's /proc and /dev bound in (rustc and the
// JVM read /proc/self). Everything is unmounted and removed by close.
type bareRoots struct {
	dir    string
	roots  []string
	mounts []string // in mount order
}

func newBareRoots(root string, n int) (_ *bareRoots, err error) {
	dir, err := os.MkdirTemp("", "sandcell-bare-")
	if err != nil {
		return nil, err
	}
	b := &bareRoots{dir: dir}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if err := b.mount("tmpfs", dir, "tmpfs", 0, "size=1g,mode=0755"); err != nil {
		return nil, err
	}
	for i := range n {
		upper, work, mnt := filepath.Join(dir, fmt.Sprint(i, "-upper")), filepath.Join(dir, fmt.Sprint(i, "-work")), filepath.Join(dir, fmt.Sprint(i))
		for _, d := range []string{upper, work, mnt} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return nil, err
			}
		}
		if err := b.mount("overlay", mnt, "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", root, upper, work)); err != nil {
			return nil, err
		}
		for _, d := range []string{"proc", "dev"} {
			if err := b.mount("/"+d, filepath.Join(mnt, d), "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
				return nil, err
			}
		}
		b.roots = append(b.roots, mnt)
	}
	return b, nil
}

func (b *bareRoots) mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := syscall.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", src, dst, err)
	}
	b.mounts = append(b.mounts, dst)
	return nil
}

func (b *bareRoots) close() error {
	var errs []error
	for _, m := range slices.Backward(b.mounts) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	b.mounts = nil
	if err := os.RemoveAll(b.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// run compiles (if the language does) and runs a job's program in root
// slot, as the sandbox would: the same argv, the sandbox's base
// environment and the language's, /work as the working directory. It
// reports whether the program passed (the job's verdict rule).
func (b *bareRoots) run(ctx context.Context, slot int, lang rootfs.Language, j batchJob) (bool, error) {
	root := b.roots[slot]
	for _, d := range []string{"work", "tmp"} {
		entries, _ := os.ReadDir(filepath.Join(root, d))
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(root, d, e.Name())); err != nil {
				return false, err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(root, "work", lang.Source), j.req.Source, 0o644); err != nil {
		return false, err
	}
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/work", "LANG=C.UTF-8", "TERM=dumb"}, lang.Env...)
	phase := func(argv []string) (oci.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env, cmd.Dir = env, "/work"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		out, errOut := &limitedBuffer{max: 1 << 20}, &limitedBuffer{max: 1 << 20}
		cmd.Stdout, cmd.Stderr = out, errOut
		err := cmd.Run()
		res := oci.Result{Stdout: string(out.b), Stderr: string(errOut.b), Status: oci.StatusOK}
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			res.ExitCode, res.Status = ee.ExitCode(), oci.StatusError
		case err != nil:
			return res, err
		}
		return res, nil
	}
	if len(lang.Compile) > 0 {
		res, err := phase(lang.Compile)
		if err != nil {
			return false, err
		}
		if res.Status != oci.StatusOK {
			return false, fmt.Errorf("compile: exit %d: %s", res.ExitCode, res.Stderr)
		}
	}
	res, err := phase(lang.Run)
	if err != nil {
		return false, err
	}
	if j.judge == nil {
		return res.Status == oci.StatusOK, nil
	}
	return j.judge(res) == verdictAccepted, nil
}

// clip shortens s to at most 400 bytes for a message.
func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}
