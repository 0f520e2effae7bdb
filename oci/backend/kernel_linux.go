package backend

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// Kernel protocol bounds.
const (
	// maxKernelReply caps one reply line. The drivers cap a value's text
	// at 1 MiB and a traceback at 64 KiB; a longer line is a protocol
	// violation and ends the kernel.
	maxKernelReply = 4 << 20
	// maxKernelJunk is how many lines that are not the awaited reply a
	// kernel may write in a row before it is killed (a cell writing to fd
	// 4 itself).
	maxKernelJunk = 1000
	// markWait bounds the wait for a cell's marks once its reply came:
	// the driver wrote them before the reply, so they are in the pipes.
	markWait = 2 * time.Second
)

// kernelIO is the protocol's pipes of a kernel being prepared: prepare
// gives the child ends to the program as fds 3 (commands) and 4 (replies),
// and leaves the program's output to the kernel's streams.
type kernelIO struct {
	cmdR, cmdW     *os.File
	replyR, replyW *os.File
}

func newKernelIO() (*kernelIO, error) {
	k := &kernelIO{}
	var err error
	if k.cmdR, k.cmdW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	if k.replyR, k.replyW, err = os.Pipe(); err != nil {
		k.close()
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	return k, nil
}

// childFiles are the program's fds 3 and 4.
func (k *kernelIO) childFiles() []*os.File { return []*os.File{k.cmdR, k.replyW} }

// started closes this process's copies of the child's ends: the reply
// pipe's EOF must come when the kernel dies.
func (k *kernelIO) started() {
	for _, f := range []**os.File{&k.cmdR, &k.replyW} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

func (k *kernelIO) close() {
	k.started()
	for _, f := range []*os.File{k.cmdW, k.replyR} {
		if f != nil {
			f.Close()
		}
	}
}

// Kernel is a live kernel sandbox (see KernelDir's comment). Exec, Save,
// Refill and Destroy may be called from any goroutine; cells run one at a
// time.
type Kernel struct {
	c      *lcContainer
	rt     *Libcontainer
	cmd    *os.File
	out    *kernelStream
	errs   *kernelStream
	ready  oci.KernelReady
	paths  map[string]string // the kernel's cgroup, for its counters
	limits limits.Set

	readyCh chan json.RawMessage
	replies chan json.RawMessage
	cur     atomic.Uint64 // the id whose reply is awaited (0: none)
	killed  atomic.Bool   // the server killed it (grace expired, protocol)
	protoMu sync.Mutex
	protErr error // the protocol violation that killed it

	mu     sync.Mutex // one cell, save or refill at a time
	seq    uint64
	stamp  workStamp
	cells  int
	closed atomic.Bool // Destroy was called
}

// StartKernel starts a kernel: req is its sandbox (Root, Args: the
// driver's argv, Env, Limits: those of the kernel's whole life, Workspace
// and WorkBytes: the session's /work, Mounts), driver the files of its
// driver, mounted read-only at KernelDir. It returns once the driver said
// it is ready, within ready (or ctx). Limits.Timeout and CPUTime are the
// kernel's lifetime's (RLIMIT_CPU per process); each cell gets its own
// budget from Exec.
//
// The request's Workspace is filled in /work now; nothing saves it but
// Save.
func (r *Libcontainer) StartKernel(ctx context.Context, req *oci.Request, driver map[string][]byte, ready time.Duration) (*Kernel, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	dir, err := r.driverDir(driver)
	if err != nil {
		return nil, err
	}
	kreq := *req
	kreq.Stdin, kreq.Files, kreq.Collect, kreq.OnOutput, kreq.Egress, kreq.Network = nil, slices.Clone(req.Files), nil, nil, "", nil
	kreq.Mounts = append(slices.Clone(req.Mounts), oci.Mount{Source: dir, Destination: oci.KernelDir})
	if err := kreq.CheckNetwork(); err != nil {
		return nil, err
	}
	kio, err := newKernelIO()
	if err != nil {
		return nil, err
	}
	// A kernel starts through libcontainer even with the fork server on:
	// it lives for many cells (its start is paid once), and it needs what
	// only libcontainer's container offers (Signal, the freezer's Pause
	// and Resume, State's cgroup paths).
	c, err := r.prepare(ctx, &kreq, nil, prepareAs{direct: true, kernel: kio})
	kio.started()
	if err != nil {
		kio.close()
		return nil, err
	}
	c.workspace = nil // saved by Save only, never by a Wait
	k := &Kernel{c: c, rt: r, cmd: kio.cmdW, limits: req.Limits,
		readyCh: make(chan json.RawMessage, 1), replies: make(chan json.RawMessage, 1)}
	k.out, k.errs = startKernelStream(c.outR), startKernelStream(c.errR)
	c.outR, c.errR = nil, nil
	if r.cfg.Cgroups != nil {
		if st, err := c.libcontainer().State(); err == nil {
			k.paths = st.CgroupPaths
		}
	}
	go k.readReplies(kio.replyR)
	if err := c.Start(ctx); err != nil {
		k.Destroy()
		return nil, err
	}
	if err := k.awaitReady(ctx, ready); err != nil {
		k.Destroy()
		return nil, err
	}
	k.stamp, _ = stampWork(c.work)
	return k, nil
}

// libcontainer is the libcontainer container of a kernel (StartKernel
// starts every kernel through libcontainer), nil once destroyed.
func (c *lcContainer) libcontainer() *libcontainer.Container {
	if l, ok := c.init.(*lcInit); ok {
		return l.lc
	}
	return nil
}

// driverDir writes a driver's files once per instance, in a directory
// named by their digest (so that kernels of one driver share it), and
// returns it. It is removed with the instance's directory.
func (r *Libcontainer) driverDir(files map[string][]byte) (string, error) {
	if len(files) == 0 {
		return "", fmt.Errorf("%w: a kernel needs its driver's files", oci.ErrInvalidRequest)
	}
	h := sha256.New()
	names := make([]string, 0, len(files))
	for name := range files {
		if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
			return "", fmt.Errorf("%w: driver file %q is not a plain name", oci.ErrInvalidRequest, name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	dir := filepath.Join(r.dir, "drivers", hex.EncodeToString(h.Sum(nil))[:16])
	r.drvMu.Lock()
	defer r.drvMu.Unlock()
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	// The sandbox's user reads them through the mount: world-readable,
	// owned by root, never writable by it.
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(tmp, n), files[n], 0o644); err != nil {
			return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
	}
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	return dir, nil
}

// awaitReady waits for the driver's first message.
func (k *Kernel) awaitReady(ctx context.Context, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case line := <-k.readyCh:
		if err := json.Unmarshal(line, &k.ready); err != nil || !k.ready.Ready {
			return fmt.Errorf("%w: the kernel's first message is not its ready message", oci.ErrRuntime)
		}
		return nil
	case <-k.c.exited:
		return fmt.Errorf("%w: the kernel %s before it was ready%s", oci.ErrRuntime, k.exit(), k.startOutput())
	case <-t.C:
		return fmt.Errorf("%w: the kernel was not ready within %s%s", oci.ErrRuntime, wait, k.startOutput())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startOutput is what a kernel that failed to start printed, for the error.
func (k *Kernel) startOutput() string {
	select {
	case <-k.errs.eof:
	case <-time.After(100 * time.Millisecond):
	}
	k.errs.mu.Lock()
	s := oci.CleanText(k.errs.idle)
	k.errs.mu.Unlock()
	if s = strings.TrimSpace(s); s == "" {
		return ""
	}
	return ": " + oci.Truncate(s, 2000)
}

// readReplies reads the kernel's replies until it dies: the ready message
// once, then the reply of the cell being run; anything else is dropped,
// and past maxKernelJunk lines in a row the kernel is killed.
func (k *Kernel) readReplies(r *os.File) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	junk, readySeen := 0, false
	for {
		line, err := readLine(br, maxKernelReply)
		if errors.Is(err, errLineTooLong) {
			k.violation(fmt.Errorf("the kernel wrote a reply longer than %s", limits.FormatSize(maxKernelReply)))
			return
		}
		if err != nil {
			return // EOF: the kernel is gone
		}
		var head struct {
			ID    *uint64 `json:"id"`
			Ready bool    `json:"ready"`
		}
		if json.Unmarshal(line, &head) == nil {
			switch {
			case head.Ready && !readySeen:
				readySeen = true
				k.readyCh <- line
				continue
			case head.ID != nil && *head.ID != 0 && *head.ID == k.cur.Load():
				select {
				case k.replies <- line:
					junk = 0
					continue
				default:
				}
			}
		}
		if junk++; junk > maxKernelJunk {
			k.violation(fmt.Errorf("the kernel wrote %d lines that are not replies to fd 4", junk))
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline) of at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(line)+len(part) > max+1 {
			return nil, errLineTooLong
		}
		line = append(line, part...)
		if err == nil {
			return bytes.TrimSuffix(line, []byte("\n")), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// violation kills a kernel that broke the protocol.
func (k *Kernel) violation(err error) {
	k.protoMu.Lock()
	if k.protErr == nil {
		k.protErr = err
	}
	k.protoMu.Unlock()
	k.killed.Store(true)
	k.c.kill()
}

func (k *Kernel) protocolError() error {
	k.protoMu.Lock()
	defer k.protoMu.Unlock()
	return k.protErr
}

// ID is the kernel's container id.
func (k *Kernel) ID() string { return k.c.id }

// Ready is what the driver said it runs.
func (k *Kernel) Ready() oci.KernelReady { return k.ready }

// Alive reports whether the kernel's process is still running.
func (k *Kernel) Alive() bool {
	select {
	case <-k.c.exited:
		return false
	default:
		return true
	}
}

// Exited is closed when the kernel's process is gone.
func (k *Kernel) Exited() <-chan struct{} { return k.c.exited }

func (k *Kernel) exit() oci.ExitStatus {
	select {
	case <-k.c.exited:
		return oci.ExitStatus{Code: k.c.exit.Code, Signal: oci.SignalName(k.c.exit.Signal)}
	default:
		return oci.ExitStatus{}
	}
}

// DeathReason says in words why a kernel that is no longer alive ended.
func (k *Kernel) DeathReason() string {
	u := k.usage()
	switch {
	case k.Alive():
		return ""
	case k.protocolError() != nil:
		return "it was killed: " + k.protocolError().Error()
	case u.OOMKills > 0:
		return "it was killed by the memory limit of " + limits.FormatSize(k.limits.MemoryBytes)
	}
	if e := k.exit(); e.Signal != "" {
		return "it was killed by " + e.Signal
	}
	return "it " + k.exit().String()
}

// usage reads the kernel's cgroup counters (zero without a cgroup).
func (k *Kernel) usage() limits.Usage {
	if k.paths == nil {
		return limits.Usage{}
	}
	u, err := limits.ReadUsage(k.rt.cfg.CgroupMode, k.paths)
	if err != nil && !errors.Is(err, limits.ErrNoCgroup) {
		k.rt.log.Debug("read kernel usage", "container_id", k.c.id, "err", err)
	}
	return u
}

// newMark is a cell's end mark: an OSC sequence that no cell can know in
// advance (its nonce is drawn here, per cell).
func newMark() []byte {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return []byte("\x1b]7770;sandcell-cell-end-" + hex.EncodeToString(b[:]) + "\x07")
}

// Exec runs one cell and returns what happened; it never returns before
// the cell's reply (or the kernel's death), whatever ctx says: a cancelled
// ctx interrupts the cell like a timeout. A kernel that died stays dead:
// the caller destroys it and starts another.
func (k *Kernel) Exec(ctx context.Context, cell oci.KernelCell) oci.KernelOutcome {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed.Load() {
		return oci.KernelOutcome{Died: true, Err: oci.ErrDestroyed}
	}
	k.seq++
	id := k.seq
	k.cells++
	mark := newMark()
	over := make(chan struct{}, 1)
	overFn := func() {
		select {
		case over <- struct{}{}:
		default:
		}
	}
	emit := func(stream string) func(string) {
		if cell.OnOutput == nil {
			return nil
		}
		return func(t string) { cell.OnOutput(stream, t) }
	}
	// Drop a reply of an earlier cell that came too late.
	select {
	case <-k.replies:
	default:
	}
	k.cur.Store(id)
	defer k.cur.Store(0)
	outCell := k.out.begin(mark, cell.OutputBytes, overFn, emit("stdout"))
	errCell := k.errs.begin(mark, cell.OutputBytes, overFn, emit("stderr"))
	u0 := k.usage()
	start := time.Now()

	o := oci.KernelOutcome{}
	cmd := make(map[string]any, len(cell.Command)+3)
	for key, v := range cell.Command {
		cmd[key] = v
	}
	cmd["op"], cmd["id"], cmd["mark"] = "run", id, string(mark)
	line, err := json.Marshal(cmd)
	if err != nil {
		o.Err = fmt.Errorf("%w: encode the cell: %w", oci.ErrRuntime, err)
	} else {
		// The driver reads commands only between cells: a write that
		// does not fit in the pipe waits for it, within the cell's time.
		_ = k.cmd.SetWriteDeadline(start.Add(cell.Timeout + cell.Grace))
		if _, err := k.cmd.Write(append(line, '\n')); err != nil && k.Alive() {
			o.Err = fmt.Errorf("%w: send the cell: %w", oci.ErrRuntime, err)
			k.killed.Store(true)
			k.c.kill()
		}
	}

	var reply json.RawMessage
	if o.Err == nil {
		reply = k.await(ctx, cell, over, u0, &o)
	}
	o.Reply = reply
	o.Elapsed = time.Since(start)
	o.Died = !k.Alive()
	if o.Died {
		<-k.c.exited
		o.Exit = k.exit()
		o.Killed = k.killed.Load()
		// Every process of the kernel is gone (it was init of its pid
		// namespace): the pipes end now.
		for _, s := range []*kernelStream{k.out, k.errs} {
			select {
			case <-s.eof:
			case <-time.After(markWait):
			}
		}
		if err := k.protocolError(); err != nil && o.Err == nil {
			o.Err = err
		}
	} else if reply != nil {
		var marks struct {
			Marks []bool `json:"marks"`
		}
		_ = json.Unmarshal(reply, &marks)
		deadline := time.After(markWait)
		for i, c := range []*cellCapture{outCell, errCell} {
			if i < len(marks.Marks) && !marks.Marks[i] {
				continue // the cell closed its stdout or stderr
			}
			select {
			case <-c.marked:
			case <-k.c.exited:
			case <-deadline:
			}
		}
	}
	k.out.end(outCell)
	k.errs.end(errCell)
	o.Stdout, o.StdoutTruncated = outCell.text(), outCell.truncated
	o.Stderr, o.StderrTruncated = errCell.text(), errCell.truncated
	u1 := k.usage()
	o.CPUTime = max(u1.CPUTime-u0.CPUTime, 0)
	o.OOMKills = u1.OOMKills - min(u0.OOMKills, u1.OOMKills)
	o.MemoryPeakBytes = int64(u1.MemoryPeakBytes)
	return o
}

// await waits for the cell's reply, interrupting it at its limits and
// killing it when it does not answer the interrupt within the grace
// period. It returns nil when the kernel died first.
func (k *Kernel) await(ctx context.Context, cell oci.KernelCell, over <-chan struct{}, u0 limits.Usage, o *oci.KernelOutcome) json.RawMessage {
	timer := time.NewTimer(cell.Timeout)
	defer timer.Stop()
	var cpuTick <-chan time.Time
	if cell.CPUTime > 0 && k.paths != nil {
		t := time.NewTicker(cpuPoll)
		defer t.Stop()
		cpuTick = t.C
	}
	var grace <-chan time.Time
	done := ctx.Done()
	interrupt := func(reason string) {
		if o.Stop != "" {
			return
		}
		o.Stop = reason
		if lc := k.c.libcontainer(); lc == nil {
			k.rt.log.Debug("interrupt kernel", "container_id", k.c.id, "err", oci.ErrDestroyed)
		} else if err := lc.Signal(unix.SIGINT); err != nil {
			k.rt.log.Debug("interrupt kernel", "container_id", k.c.id, "err", err)
		}
		grace = time.After(cell.Grace)
	}
	for {
		select {
		case line := <-k.replies:
			var r struct {
				Status      string `json:"status"`
				Interrupted bool   `json:"interrupted"`
			}
			_ = json.Unmarshal(line, &r)
			// A cell that ended on its own as its limit came was not
			// interrupted.
			if (o.Stop == oci.CellTimeout || o.Stop == oci.CellCPUTime) && !r.Interrupted && r.Status == "ok" {
				o.Stop = ""
			}
			return line
		case <-k.c.exited:
			return nil
		case <-timer.C:
			interrupt(oci.CellTimeout)
		case <-cpuTick:
			if u := k.usage(); u.CPUTime-u0.CPUTime >= cell.CPUTime {
				interrupt(oci.CellCPUTime)
				cpuTick = nil
			}
		case <-over:
			interrupt(oci.CellOutput)
		case <-done:
			done = nil
			interrupt(oci.CellCancelled)
		case <-grace:
			grace = nil
			k.killed.Store(true)
			k.c.kill()
		}
	}
}

// Save hands /work to ws, frozen, if it changed since the kernel last
// saved or refilled it, or if files are given: those are written into
// /work first (the server's outputs of the cell, replacing what is at
// their paths). It reports whether it saved. A kernel without a freezer
// (no cgroup) is saved running: the copy is safe (see Workspace.Save), not
// atomic.
func (k *Kernel) Save(ws oci.Workspace, files []api.File) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed.Load() {
		return false, oci.ErrDestroyed
	}
	if len(files) == 0 {
		if st, ok := stampWork(k.c.work); ok && k.stamp.valid && st == k.stamp {
			return false, nil
		}
	}
	thaw := k.freeze()
	defer thaw()
	if len(files) > 0 {
		root, err := os.OpenRoot(k.c.work)
		if err != nil {
			return false, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
		uid, gid := k.rt.SandboxIDs()
		for _, f := range files {
			if err := oci.WriteFile(root, f, int(uid), int(gid)); err != nil {
				root.Close()
				return false, err
			}
		}
		root.Close()
	}
	err := ws.Save(k.c.work)
	k.stamp, _ = stampWork(k.c.work)
	if err != nil {
		k.stamp = workStamp{} // the next cell tries again
	}
	return err == nil, err
}

// Refill replaces /work with the workspace's files (another tool changed
// the session since the kernel last saved it): /work is emptied with the
// kernel frozen, then filled like a run's (fill_linux.go: by the fill
// helper in the kernel's memory cgroup, so the files count against the
// kernel's limit, not the server's; issue #17). Files the kernel holds
// open keep pointing at the old ones. A session that no longer fits in
// the kernel's memory limit is refused (ErrInvalidRequest).
func (k *Kernel) Refill(ws oci.Workspace) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed.Load() {
		return oci.ErrDestroyed
	}
	if err := k.emptyWork(); err != nil {
		return err
	}
	// Filled running: on cgroup v2 the helper would join the frozen
	// cgroup and freeze with it. The kernel is between cells (k.mu), and
	// the copy works on directory fds beneath /work (no path is followed,
	// workspace.FillFrom), so whatever the kernel does meanwhile stays in
	// /work.
	req := &oci.Request{Workspace: ws}
	uid, gid := k.rt.SandboxIDs()
	fh, err := k.c.startFill(req, uid, gid, k.rt.cfg.Cgroups != nil)
	if err != nil {
		return err
	}
	if err := k.c.fill(context.Background(), fh, req); err != nil {
		return err
	}
	k.stamp, _ = stampWork(k.c.work)
	return nil
}

// emptyWork removes everything of /work, the kernel frozen.
//
// Preconditions: k.mu is held.
func (k *Kernel) emptyWork() error {
	thaw := k.freeze()
	defer thaw()
	root, err := os.OpenRoot(k.c.work)
	if err != nil {
		return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer root.Close()
	entries, err := os.ReadDir(k.c.work)
	if err != nil {
		return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	// os.Root removes without following a link, and the kernel is
	// frozen: nothing can swap an entry for a link meanwhile.
	for _, e := range entries {
		if err := root.RemoveAll(e.Name()); err != nil {
			return fmt.Errorf("%w: empty /work: %w", oci.ErrRuntime, err)
		}
	}
	return nil
}

// freeze stops every process of the kernel until the returned func is
// called (the cgroup freezer), so that /work holds still while it is
// copied. Without a freezer the kernel runs on.
func (k *Kernel) freeze() (thaw func()) {
	if k.paths == nil || !k.Alive() {
		return func() {}
	}
	lc := k.c.libcontainer()
	if lc == nil {
		return func() {}
	}
	if err := lc.Pause(); err != nil {
		k.rt.log.Debug("freeze kernel", "container_id", k.c.id, "err", err)
		return func() {}
	}
	return func() {
		if err := lc.Resume(); err != nil {
			k.rt.log.Warn("thaw kernel", "container_id", k.c.id, "err", err)
		}
	}
}

// ReadFile reads a file of the kernel's /work (an image a cell wrote), at
// most max bytes (more is an error), never through a symlink.
func (k *Kernel) ReadFile(unsafeRel string, max int64) ([]byte, error) {
	if err := oci.CheckRelPath(unsafeRel); err != nil {
		return nil, err
	}
	root, err := unix.Open(k.c.work, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, unsafeRel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", unsafeRel, err)
	}
	f := os.NewFile(uintptr(fd), unsafeRel)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", unsafeRel)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s: %s, more than %s", unsafeRel, limits.FormatSize(st.Size()), limits.FormatSize(max))
	}
	// The file may grow meanwhile: never more than max.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: more than %s", unsafeRel, limits.FormatSize(max))
	}
	return data, nil
}

// Destroy kills the kernel and removes every trace of it (as a
// container's Destroy). Safe to call more than once.
func (k *Kernel) Destroy() error {
	k.closed.Store(true)
	k.killed.Store(true)
	err := k.c.Destroy()
	k.cmd.Close()
	return err
}

// Cells is how many cells the kernel ran.
func (k *Kernel) Cells() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cells
}

// String names the kernel in logs.
func (k *Kernel) String() string {
	return k.c.id + " (" + k.ready.Language + " " + k.ready.Version + ", pid " + strconv.Itoa(k.pid()) + ")"
}

func (k *Kernel) pid() int {
	init := k.c.init
	if init == nil {
		return 0
	}
	p, _ := init.pid()
	return p
}
