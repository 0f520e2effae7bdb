package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// run is what every backend shares for one run: its /work on the host, its
// streams, the reasons to stop it and the verdict. A backend supplies how
// to start, kill and reap the program.
type run struct {
	id        string
	limits    limits.Set
	collect   func([]api.File)
	workspace oci.Workspace // set until Save was called
	onOutput  func(stream, text string)
	runDir    string
	work      string
	// settle, if set, waits until no process of the run is left (the
	// backend's; nil when the reaped process was the last one). It runs
	// before /work is read back.
	settle func() error
	// cpuUsed, if set, is the CPU time the run has used since Start, for
	// a backend whose kernel does not enforce RLIMIT_CPU (gVisor's sentry
	// does not): await then polls it and stops the run at the limit.
	cpuUsed func() time.Duration

	stdin  []byte
	stream io.Reader // Request.StdinStream: copied instead of stdin
	stdinR *os.File  // the program's end; nil means /dev/null
	stdinW *os.File
	outW   *os.File // the program's ends of stdout and stderr
	errW   *os.File
	outR   *os.File
	errR   *os.File
	stdout *oci.Capture
	stderr *oci.Capture

	enforced map[string]string // the result's limits_enforced

	stop    chan oci.StopReason // the first reason to stop wins
	started time.Time

	exited chan struct{} // closed when the program's process was reaped
	exit   oci.ExitInfo
	ended  time.Time

	// live, if set, is a live sandbox's disk: its root overlay and the
	// disk that holds /work, unmounted first at cleanup.
	live *liveDisk

	// pooled: the run was prepared ahead of its request (see Pool); its
	// output is read only once the request is bound (bind). Also set for
	// a kernel, whose output its streams read per cell (kernelStream).
	pooled bool
}

// newRun makes the run's directory, its empty /work tmpfs, and the pipes
// for its streams. The backend fills /work (run.fill) once the run's
// cgroup exists, before the program starts.
func newRun(id, runDir string, req *oci.Request, uid, gid uint32, live *liveDisk) (_ *run, retErr error) {
	r := &run{live: live, id: id, limits: req.Limits, collect: req.Collect, workspace: req.Workspace, onOutput: req.OnOutput,
		runDir: runDir, stdin: req.Stdin, stream: req.StdinStream, stop: make(chan oci.StopReason, 1), exited: make(chan struct{})}
	defer func() {
		if retErr != nil {
			r.cleanup()
		}
	}()
	var work string
	var err error
	if live != nil {
		work, err = live.mount(runDir)
	} else {
		work, err = mountWork(runDir, req, uid, gid)
	}
	r.work = work
	if err != nil {
		return nil, err
	}
	if r.outR, r.outW, err = childPipe(false); err != nil {
		return nil, err
	}
	if r.errR, r.errW, err = childPipe(false); err != nil {
		return nil, err
	}
	if req.Stdin != nil || req.StdinStream != nil {
		if r.stdinW, r.stdinR, err = childPipe(true); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// childPipe is a pipe between sandcell and a run's program: ours, the end
// sandcell reads (or, for the program's input, writes), is non-blocking
// and in the runtime's poller; theirs, the program's end, is a plain
// blocking file that never enters the poller. os.Pipe would register and
// set non-blocking both ends, and handing the program's end over (Fd)
// would set it blocking again: a dozen system calls of every run for fds
// that sandcell never waits on (BENCHMARKS.md, issue #18, ninth pass).
func childPipe(input bool) (ours, theirs *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("%w: pipe: %w", oci.ErrRuntime, err)
	}
	o, t := p[0], p[1]
	if input {
		o, t = p[1], p[0]
	}
	if err := unix.SetNonblock(o, true); err != nil {
		unix.Close(o)
		unix.Close(t)
		return nil, nil, fmt.Errorf("%w: pipe: %w", oci.ErrRuntime, err)
	}
	return os.NewFile(uintptr(o), "|sandcell"), os.NewFile(uintptr(t), "|program"), nil
}

// started says the program's process holds its own copies of the stream
// ends: ours must be closed or EOF never comes; reading begins.
func (r *run) childStarted() {
	for _, f := range []**os.File{&r.outW, &r.errW, &r.stdinR} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
	if !r.pooled {
		r.capture()
	}
}

// capture starts reading the program's output.
func (r *run) capture() {
	over := func() { r.requestStop(oci.StopOutput) }
	emit := func(stream string) func(string) {
		if r.onOutput == nil {
			return nil
		}
		return func(text string) { r.onOutput(stream, text) }
	}
	r.stdout, r.stderr = oci.StartCaptures(r.outR, r.errR, r.limits.OutputBytes, over, emit("stdout"), emit("stderr"))
	r.outR, r.errR = nil, nil
}

// begin marks the program's start (the wall clock counts from here) and
// feeds its standard input.
func (r *run) begin() {
	r.started = time.Now()
	if r.stdinW != nil {
		var in io.Reader = bytes.NewReader(r.stdin)
		if r.stream != nil {
			in = r.stream
		}
		go func(w *os.File, in io.Reader) {
			// EPIPE when the program does not read its input is fine.
			_, _ = io.Copy(w, in)
			w.Close()
		}(r.stdinW, in)
		r.stdinW = nil
	}
}

func (r *run) requestStop(s oci.StopReason) {
	select {
	case r.stop <- s:
	default:
	}
}

// exitedWith records how the program's process ended.
func (r *run) exitedWith(ws syscall.WaitStatus) {
	if ws.Signaled() {
		r.exit = oci.ExitInfo{Signal: ws.Signal(), Code: 128 + int(ws.Signal())}
	} else {
		r.exit = oci.ExitInfo{Code: ws.ExitStatus()}
	}
	r.ended = time.Now()
	close(r.exited)
}

// cpuPoll is how often the CPU-time watchdog looks: the run may pass its
// CPU-time limit by about this much (times its CPUs) before it is stopped.
const cpuPoll = 50 * time.Millisecond

// watchCPU stops the run when cpuUsed reaches the CPU-time limit; it ends
// with the program.
func (r *run) watchCPU() {
	t := time.NewTicker(cpuPoll)
	defer t.Stop()
	for {
		select {
		case <-r.exited:
			return
		case <-t.C:
			if r.cpuUsed() >= r.limits.CPUTime {
				r.requestStop(oci.StopCPUTime)
				return
			}
		}
	}
}

// await blocks until the program ends or a reason to stop it comes (wall
// clock, output cap, cancellation); then kill is called and the program
// reaped. It returns why sandcell stopped the run (StopNone if it did not).
func (r *run) await(ctx context.Context, kill func()) (oci.StopReason, error) {
	timer := time.NewTimer(time.Until(r.started.Add(r.limits.Timeout)))
	defer timer.Stop()
	if r.cpuUsed != nil && r.limits.CPUTime > 0 {
		go r.watchCPU()
	}
	stop := oci.StopNone
	select {
	case <-r.exited:
	case stop = <-r.stop:
	case <-timer.C:
		stop = oci.StopTimeout
	case <-ctx.Done():
		stop = oci.StopCancelled
	}
	if stop != oci.StopNone {
		kill()
		select {
		case <-r.exited:
		case <-time.After(5 * time.Second):
			return stop, fmt.Errorf("%w: container %s did not die after SIGKILL", oci.ErrRuntime, r.id)
		}
		// The program may have exited on its own in the same instant.
		if stop == oci.StopTimeout && r.ended.Sub(r.started) < r.limits.Timeout {
			stop = oci.StopNone
		}
	}
	return stop, nil
}

// finish is a backend's Wait: it waits for the end (see await), reads the
// usage counters, takes off the CPU time used before the program ran, and
// decides the verdict.
//
// A run whose program may still be alive when finish returns (no Start, or
// a container that would not die) gets no live output after that and is not
// saved to its workspace.
func (r *run) finish(ctx context.Context, kill func(), usage func() limits.Usage, cpuBase time.Duration) api.Phase {
	if r.started.IsZero() {
		r.mute()
		return api.InternalError(errors.New("Wait called before Start"))
	}
	stop, err := r.await(ctx, kill)
	if err != nil {
		r.mute()
		res := api.InternalError(err)
		if r.workspace != nil {
			res.Message += "; " + notSaved
		}
		return res
	}
	u := usage()
	u.CPUTime = max(u.CPUTime-cpuBase, 0)
	return r.result(stop, u)
}

// notSaved ends the message of a run whose /work was not saved.
const notSaved = "(the session keeps its files from before this run)"

// result waits for the streams to close, decides the verdict, and reads
// /work back: Collect's files, then the workspace's Save. Preconditions: the
// program's process was reaped.
func (r *run) result(stop oci.StopReason, usage limits.Usage) api.Phase {
	_, outTrunc := r.stdout.Wait()
	_, errTrunc := r.stderr.Wait()
	// Output past the cap that raced with the exit still counts.
	if stop == oci.StopNone && (outTrunc || errTrunc) {
		stop = oci.StopOutput
	}
	status, msg := oci.ExitVerdict(r.exit, stop, usage, r.limits)
	// /work is read only when nothing of the run can change it any more.
	var settleErr error
	if (r.collect != nil || r.workspace != nil) && r.settle != nil {
		if settleErr = r.settle(); settleErr != nil {
			status, msg = api.StatusInternalError, "processes of the run outlived it: "+settleErr.Error()
			if r.workspace != nil {
				msg += "; /work was not saved " + notSaved
			}
		}
	}
	if r.collect != nil && status == api.StatusOK {
		files, err := oci.Collect(r.work, r.limits.TmpfsBytes)
		if err != nil {
			status, msg = api.StatusError, "collecting the compiled files from /work: "+err.Error()
		} else {
			r.collect(files)
		}
	}
	if ws := r.workspace; ws != nil && settleErr == nil {
		r.workspace = nil // Save is called once, even if Wait is not
		if err := ws.Save(r.work); errors.Is(err, oci.ErrWorkRefused) {
			// The program left what the session may not keep (past its
			// quota, too deep, too many entries): its doing, not ours.
			status, msg = api.StatusError, fmt.Sprintf("the session did not keep this run's /work: %v %s", err, notSaved)
		} else if err != nil {
			status, msg = api.StatusInternalError, fmt.Sprintf("saving /work to the session failed: %v %s", err, notSaved)
		}
	}
	return api.Phase{
		Stdout:          r.stdout.Text(),
		Stderr:          r.stderr.Text(),
		StdoutBytes:     r.stdout.Bytes(),
		StderrBytes:     r.stderr.Bytes(),
		ExitCode:        r.exit.Code,
		Signal:          oci.SignalName(r.exit.Signal),
		Status:          status,
		ExecutionTimeMS: r.ended.Sub(r.started).Milliseconds(),
		CPUTimeMS:       usage.CPUTime.Milliseconds(),
		MemoryPeakBytes: int64(usage.MemoryPeakBytes),
		StdoutTruncated: outTrunc,
		StderrTruncated: errTrunc,
		Message:         msg,
		LimitsEnforced:  r.enforced,
	}
}

// mute ends the live output (see capture.mute).
func (r *run) mute() {
	if r.stdout != nil {
		r.stdout.Mute()
		r.stderr.Mute()
	}
}

// drain waits until both streams are closed (after the program died).
func (r *run) drain() {
	if r.stdout != nil {
		r.stdout.Wait()
		r.stderr.Wait()
	}
}

// cleanup closes what is left of the streams, unmounts /work and removes
// the run's directory.
func (r *run) cleanup() error {
	for _, f := range []*os.File{r.outW, r.errW, r.outR, r.errR, r.stdinR, r.stdinW} {
		if f != nil {
			f.Close()
		}
	}
	var errs []error
	if r.live != nil {
		// Before anything below runDir is removed: RemoveAll must never
		// descend into the sandbox's disk.
		left, err := r.live.unmount()
		if err != nil {
			errs = append(errs, err)
		}
		if left {
			return errors.Join(errs...)
		}
		r.work = ""
	}
	if r.work != "" {
		if err := unix.Unmount(r.work, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", r.work, err))
		}
	}
	if r.runDir != "" {
		// The usual run directory is its /work mountpoint alone, now
		// empty: two rmdirs; anything else goes through RemoveAll.
		if r.work != "" && unix.Rmdir(r.work) == nil && unix.Rmdir(r.runDir) == nil {
			return errors.Join(errs...)
		}
		if err := os.RemoveAll(r.runDir); errors.Is(err, unix.EBUSY) {
			err = removeMounted(r.runDir)
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mountWork mounts a fresh size-capped tmpfs for the run's /work on the
// host. The tmpfs is owned by the sandbox's host uid so the program can
// write there.
func mountWork(runDir string, req *oci.Request, uid, gid uint32) (string, error) {
	if err := os.Mkdir(runDir, 0o711); err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	work := filepath.Join(runDir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	// /work holds a session's files: as many inodes as a session may
	// hold entries (internal/workspace allows 100000), or the cap of
	// every run tmpfs if that is more.
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755,uid=%d,gid=%d", req.WorkSize(), max(oci.TmpfsInodeCap(req.WorkSize()), 131072), uid, gid)
	if err := unix.Mount("tmpfs", work, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("%w: mount /work tmpfs: %w", oci.ErrRuntime, err)
	}
	return work, nil
}

// base is the run itself (see poolMember).
func (r *run) base() *run { return r }
