package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/seccomp"
)

// benchCase is one workload, run with the same argv in every runner.
type benchCase struct {
	lang string
	args []string
}

var benchCases = []benchCase{
	{lang: "sh", args: []string{"/bin/true"}},
	{lang: "python", args: []string{"/usr/bin/python3", "-B", "-c", "print(1)"}},
}

// cmdBench: sandcell bench [-n N] measures, interleaved in one run, a fresh
// sandcell run against the bare process (the same binary of the same layer,
// chrooted, no namespaces) and the runc CLI running the same spec as an OCI
// bundle. It prints a Markdown table of medians.
func cmdBench(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	n := fs.Int("n", 50, "iterations per runner and case")
	runcPath := fs.String("runc", "runc", "runc CLI to compare against (empty to skip)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	a, err := openApp(env.cfg, env.log)
	if err != nil {
		return env.fail(err)
	}
	defer a.Close()
	if *runcPath != "" {
		if p, err := exec.LookPath(*runcPath); err == nil {
			*runcPath = p
		} else {
			fmt.Fprintf(env.stderr, "sandcell bench: %s not found, skipping the runc CLI column\n", *runcPath)
			*runcPath = ""
		}
	}
	fmt.Fprintf(env.stdout, "| case | bare host p50 | sandcell p50 | sandcell p90 | runc CLI p50 | sandcell - bare | runc CLI / sandcell |\n")
	fmt.Fprintf(env.stdout, "|---|---|---|---|---|---|---|\n")
	for _, bc := range benchCases {
		row, err := benchOne(ctx, a, bc, *n, *runcPath)
		if err != nil {
			return env.fail(fmt.Errorf("bench %s: %w", bc.lang, err))
		}
		fmt.Fprintln(env.stdout, row)
	}
	fmt.Fprintf(env.stdout, "\n%d iterations each, interleaved (bare, sandcell, runc CLI in turn); times in ms.\n", *n)
	if gv, err := a.gvisor(); err != nil {
		fmt.Fprintf(env.stderr, "sandcell bench: skipping gVisor: %v\n", err)
	} else {
		row, err := benchGVisor(ctx, a, gv, benchCases[1], max(*n/5, 5))
		if err != nil {
			return env.fail(fmt.Errorf("bench gvisor: %w", err))
		}
		fmt.Fprintf(env.stdout, "\n| gVisor (%s) | sandcell p50 | runsc CLI p50 | sandcell / runsc CLI |\n|---|---|---|---|\n%s\n", gv.Platform(), row)
	}
	return 0
}

// benchGVisor compares a sandcell run with isolation gvisor against the
// runsc CLI running the same bundle with the same flags, interleaved.
func benchGVisor(ctx context.Context, a *app, gv *oci.Runsc, bc benchCase, n int) (string, error) {
	req, err := benchRequest(a, bc)
	if err != nil {
		return "", err
	}
	filter, err := seccomp.GVisorProfile()
	if err != nil {
		return "", err
	}
	tmp, err := benchDir(a)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	var sc, cli []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		res, err := oci.Run(ctx, gv, req)
		if err != nil || res.Status != oci.StatusOK {
			return "", fmt.Errorf("sandcell run: %v %s %s", err, res.Status, res.Stderr)
		}
		sc = append(sc, time.Since(start))

		dir := filepath.Join(tmp, strconv.Itoa(i))
		work := filepath.Join(dir, "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			return "", err
		}
		spec, err := oci.Spec(req, oci.Host{WorkDir: work, UIDBase: uint32(a.cfg.UIDBase), Seccomp: filter})
		if err != nil {
			return "", err
		}
		bundle := filepath.Join(dir, "bundle")
		if err := oci.WriteBundle(bundle, spec); err != nil {
			return "", err
		}
		id := fmt.Sprintf("sandcell-bench-gv-%d-%d", os.Getpid(), i)
		start = time.Now()
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		out, err := exec.CommandContext(rctx, gv.Path(), "--root", filepath.Join(dir, "state"), "--platform", gv.Platform(),
			"--network", "none", "--oci-seccomp", "--ignore-cgroups", "run", "--bundle", bundle, id).CombinedOutput()
		cancel()
		if err != nil {
			return "", fmt.Errorf("runsc run: %w: %s", err, out)
		}
		cli = append(cli, time.Since(start))
	}
	s50, c50 := pct(sc, 50), pct(cli, 50)
	return fmt.Sprintf("| %s `%s` (%d runs each) | %s | %s | %.2fx |", bc.lang, strings.Join(bc.args, " "), n, ms(s50), ms(c50), float64(s50)/float64(c50)), nil
}

func benchOne(ctx context.Context, a *app, bc benchCase, n int, runcPath string) (string, error) {
	req, err := benchRequest(a, bc)
	if err != nil {
		return "", err
	}
	tmp, err := benchDir(a)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	var bare, sc, rc []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		cmd := exec.CommandContext(ctx, bc.args[0], bc.args[1:]...)
		cmd.Env = req.Env
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: req.Root}
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("bare %v: %w", bc.args, err)
		}
		bare = append(bare, time.Since(start))

		start = time.Now()
		res, err := oci.Run(ctx, a.rt, req)
		if err != nil || res.Status != oci.StatusOK {
			return "", fmt.Errorf("sandcell run: %v %s %s", err, res.Status, res.Stderr)
		}
		sc = append(sc, time.Since(start))

		if runcPath != "" {
			d, err := runcOnce(ctx, a, req, runcPath, filepath.Join(tmp, strconv.Itoa(i)))
			if err != nil {
				return "", err
			}
			rc = append(rc, d)
		}
	}
	b50, s50, s90 := pct(bare, 50), pct(sc, 50), pct(sc, 90)
	row := fmt.Sprintf("| %s `%s` | %s | %s | %s |", bc.lang, strings.Join(bc.args, " "), ms(b50), ms(s50), ms(s90))
	if len(rc) > 0 {
		r50 := pct(rc, 50)
		row += fmt.Sprintf(" %s | %s | %.2fx |", ms(r50), ms(s50-b50), float64(r50)/float64(s50))
	} else {
		row += fmt.Sprintf(" - | %s | - |", ms(s50-b50))
	}
	return row, nil
}

// benchRequest is the oci request of a bench case, with default limits.
func benchRequest(a *app, bc benchCase) (*oci.Request, error) {
	lang, err := rootfs.Lookup(bc.lang)
	if err != nil {
		return nil, err
	}
	root, err := a.store.Root(lang)
	if err != nil {
		return nil, err
	}
	lim, _, err := limits.Resolve(a.cfg.Defaults, a.cfg.Ceilings, limits.Set{})
	if err != nil {
		return nil, err
	}
	return &oci.Request{Root: root, Args: bc.args, Env: lang.Env, Limits: lim}, nil
}

// benchDir makes a directory for the CLI runners' bundles inside this
// instance's state directory (removed with it after a crash), which the
// mapped container root can traverse.
func benchDir(a *app) (string, error) {
	dir, err := os.MkdirTemp(filepath.Join(a.cfg.StateDir, a.rt.Instance()), "bench-")
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o711)
}

// runcOnce runs the same spec with the runc CLI from a bundle directory. The
// time counted covers writing the bundle's work dir as sandcell does.
func runcOnce(ctx context.Context, a *app, req *oci.Request, runcPath, dir string) (time.Duration, error) {
	id := "sandcell-bench-" + filepath.Base(dir) + "-" + strconv.Itoa(os.Getpid())
	start := time.Now()
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return 0, err
	}
	uid := int(a.cfg.UIDBase) + oci.SandboxUID
	for _, f := range req.Files {
		p := filepath.Join(work, f.Path)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return 0, err
		}
		_ = os.Chown(p, uid, uid)
	}
	_ = os.Chown(work, uid, uid)
	spec, err := oci.Spec(req, oci.Host{WorkDir: work, CgroupsPath: a.parent.ChildPath(id), UIDBase: uint32(a.cfg.UIDBase), Seccomp: a.filter})
	if err != nil {
		return 0, err
	}
	bundle := filepath.Join(dir, "bundle")
	if err := oci.WriteBundle(bundle, spec); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, runcPath, "--root", filepath.Join(dir, "state"), "run", "--bundle", bundle, id)
	cmd.Stdout = io.Discard
	out := &limitedBuffer{max: 4096}
	cmd.Stderr = out
	err = cmd.Run()
	d := time.Since(start)
	_ = a.parent.RemoveChild(id)
	if err != nil {
		return 0, fmt.Errorf("runc run: %w: %s", err, out.b)
	}
	return d, nil
}

type limitedBuffer struct {
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }
