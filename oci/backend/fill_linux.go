package backend

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// Filling /work from the run's cgroup. A tmpfs page is charged to the
// memory cgroup of the process that first writes it, and it stays charged
// there. The server used to write a session's files into the run's /work
// itself, so they were charged to the server's cgroup, not the run's: a
// run with a 32 MiB memory limit held a 196 MiB session in memory (its
// reported peak: 19 MiB; issue #17). Now a helper process (this binary,
// re-executed as "sandcell-fill") joins the run's memory cgroup first and
// then writes /work: the session's tree (with the function given to
// InitFill: package workspace's copier) and the request's files. Its
// pages count against the run's limit like anything the program writes;
// a session that does not fit in the limit is refused (ErrInvalidRequest)
// instead of run. The helper's own start-up memory was allocated before it
// joined, in the server's cgroup, and is freed when it exits.
//
// The helper costs a process start (about 7 ms of latency and 9 ms of
// CPU: the binary's runtime and package init): runs use it for a
// session's /work past fillInProcessMax bytes or fillInProcessEntries
// entries (BoundedWorkspace), or for request files of more than
// fillInProcessMax bytes. A smaller session and smaller one-shot files (a
// program's source) are written by the server, their pages charged to
// it: at most fillInProcessMax per run, session and files together.
// Without cgroups (a rootless server without delegation) there is no
// memory limit to charge, and the server fills /work itself.

// fillArg re-executes this binary as the fill helper:
//
//	sandcell-fill UID GID TREE
//
// fd 3 is a pipe that delivers one byte once the helper is in the run's
// cgroup, fd 4 the run's /work, fd 5 a pipe of request files
// (writeFileStream), and, when TREE is 1, fd 6 the workspace's tree. The
// helper reports an error as one line on stderr, and exits 2 for an error
// the request caused (api.ErrInvalid), 1 for any other.
const fillArg = "sandcell-fill"

// fillInProcessMax is the most bytes of request files and a session's
// files together that the server writes into /work itself.
const fillInProcessMax = 1 << 20

// fillInProcessEntries is the most entries of a session's tree that the
// server copies into /work itself (each one a tmpfs inode and dentry
// charged to the server while the run lives).
const fillInProcessEntries = 256

// fillTimeout bounds a helper's fill (the context of Prepare may bound it
// sooner).
const fillTimeout = 2 * time.Minute

// treeFiller copies a workspace's tree into /work: set by InitFill.
var treeFiller func(src, dst *os.File, uid, gid int) error

// TreeWorkspace is a Workspace that the fill helper can fill /work from:
// Tree opens its tree (a directory), which the helper copies with the
// function given to InitFill. Its Fill is used when there is no helper.
type TreeWorkspace interface {
	oci.Workspace
	Tree() (*os.File, error)
}

// BoundedWorkspace is a TreeWorkspace that can say cheaply whether its
// tree holds at most maxBytes in at most maxEntries entries (looking at
// no more than that). A small one is filled by the server's Fill, as a
// request's small files are, without the helper's process start.
type BoundedWorkspace interface {
	TreeWorkspace
	Within(maxBytes int64, maxEntries int) (bool, error)
}

// InitFill is the fill helper's re-exec hook, to call from main's init
// right after Init, with the function that copies a workspace's tree
// (workspace.FillFrom). In the helper it fills /work and exits; in any
// other process it records fill, which turns the helper on: a binary that
// does not call it (a test binary) fills /work in-process.
func InitFill(fill func(src, dst *os.File, uid, gid int) error) {
	treeFiller = fill
	if len(os.Args) > 1 && os.Args[1] == fillArg {
		os.Exit(fillChild())
	}
}

// fillByHelper says whether a run with a cgroup has its /work filled by
// the helper (tree and files) rather than in-process.
func fillByHelper(req *oci.Request) bool {
	if treeFiller == nil {
		return false
	}
	var n int
	for _, f := range req.Files {
		n += len(f.Data)
	}
	if n > fillInProcessMax {
		return true
	}
	tw, ok := req.Workspace.(TreeWorkspace)
	if !ok {
		return false
	}
	bw, ok := tw.(BoundedWorkspace)
	if !ok {
		return true
	}
	// An error here is the helper's to report, as it would be.
	small, err := bw.Within(int64(fillInProcessMax-n), fillInProcessEntries)
	return err != nil || !small
}

// cgroupTarget is where the helper goes: the run's cgroup directories
// (the backend's map, by controller; "" is cgroup v2's), and how to read
// the run's usage counters.
type cgroupTarget struct {
	paths map[string]string
	usage func() limits.Usage
}

// memoryDir is the cgroup directory whose memory the helper is charged
// to: the memory hierarchy's on cgroup v1, the one cgroup on v2. Only
// that one: the pids and cpu hierarchies of a v1 run stay the program's
// alone (the helper's threads do not take its pids).
func (t cgroupTarget) memoryDir() string {
	if d := t.paths["memory"]; d != "" {
		return d
	}
	return t.paths[""]
}

// fillHelper is a started helper waiting for its go-ahead.
type fillHelper struct {
	cmd    *exec.Cmd
	done   chan error
	reaped bool
	goW    *os.File
	filesW *os.File
	stderr *os.File
	files  []api.File
}

// startFill starts the fill helper for req's /work when the run has a
// cgroup and fillByHelper says so, else returns nil: then fill fills /work
// in-process. It is started ahead (its own start-up takes a few ms) and
// waits, in the server's cgroup, for finish.
func (r *run) startFill(req *oci.Request, uid, gid uint32, cgroups bool) (*fillHelper, error) {
	if !cgroups || !fillByHelper(req) {
		return nil, nil
	}
	workDir, err := os.Open(r.work)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer workDir.Close()
	goR, goW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer goR.Close()
	filesR, filesW, err := os.Pipe()
	if err != nil {
		goW.Close()
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer filesR.Close()
	h := &fillHelper{goW: goW, filesW: filesW, files: req.Files}
	fail := func(err error) (*fillHelper, error) {
		h.abort()
		return nil, err
	}
	files := []*os.File{goR, workDir, filesR}
	tree := "0"
	if tw, ok := req.Workspace.(TreeWorkspace); ok {
		src, err := tw.Tree()
		if err != nil {
			return fail(fmt.Errorf("%w: filling /work from the session: %w", oci.ErrRuntime, err))
		}
		defer src.Close()
		files, tree = append(files, src), "1"
	}
	// Its one line of error, in a file (startChild wants *os.File).
	if h.stderr, err = os.CreateTemp("", "sandcell-fill-"); err != nil {
		return fail(fmt.Errorf("%w: %w", oci.ErrRuntime, err))
	}
	os.Remove(h.stderr.Name())
	exe, err := helperExe()
	if err != nil {
		return fail(err)
	}
	cmd := exec.Command(exe, fillArg, strconv.Itoa(int(uid)), strconv.Itoa(int(gid)), tree)
	cmd.Args[0] = "sandcell-fill"
	cmd.ExtraFiles = files
	cmd.Stderr = h.stderr
	// Few threads: those it makes after joining count in a cgroup v2
	// run's pids limit.
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startChild(cmd); err != nil {
		return fail(fmt.Errorf("%w: start the fill helper: %w", oci.ErrRuntime, err))
	}
	h.cmd, h.done = cmd, make(chan error, 1)
	go func() { h.done <- cmd.Wait() }()
	return h, nil
}

// abort ends a helper that will not fill (a run that failed before):
// without a go-ahead it exits at once.
func (h *fillHelper) abort() {
	if h == nil {
		return
	}
	h.goW.Close()
	h.filesW.Close()
	if h.cmd != nil && !h.reaped {
		_ = h.cmd.Process.Kill()
		<-h.done
		h.reaped = true
	}
	if h.stderr != nil {
		h.stderr.Close()
	}
}

// fill fills the run's /work for req: by h, the helper startFill
// started, in the run's cgroup (target), or in-process (fillWork) when
// there is none.
func (r *run) fill(ctx context.Context, h *fillHelper, req *oci.Request, uid, gid uint32, target *cgroupTarget) error {
	if h == nil {
		return oci.FillWork(r.work, req, uid, gid)
	}
	defer h.abort()
	dir := target.memoryDir()
	if dir == "" {
		return fmt.Errorf("%w: fill /work: the run has no memory cgroup among %d", oci.ErrRuntime, len(target.paths))
	}
	// OOM kills of the helper's fill, not of the cgroup's life: a
	// kernel's cgroup may have seen some in earlier cells.
	before := target.usage().OOMKills
	err := h.finish(ctx, dir)
	if u := target.usage(); u.OOMKills > before {
		return fmt.Errorf("%w: the session's files and the request's do not fit in the run's memory limit of %s (its /work is a tmpfs, which counts against it): ask for more memory, or remove files",
			oci.ErrInvalidRequest, limits.FormatSize(r.limits.MemoryBytes))
	}
	return err
}

// finish puts the helper into the memory cgroup dir, lets it go and waits
// for it (bounded by fillTimeout).
func (h *fillHelper) finish(ctx context.Context, cgroupDir string) error {
	ctx, cancel := context.WithTimeout(ctx, fillTimeout)
	defer cancel()
	if err := writeCgroupProc(cgroupDir, h.cmd.Process.Pid); err != nil {
		return fmt.Errorf("%w: put the fill helper into the run's cgroup: %w", oci.ErrRuntime, err)
	}
	if _, err := h.goW.Write([]byte{1}); err != nil {
		return fmt.Errorf("%w: start the fill helper: %w", oci.ErrRuntime, err)
	}
	h.goW.Close()
	// The helper reads the files after the tree; a write error means it
	// stopped early, which its exit status says.
	go func() {
		_ = writeFileStream(h.filesW, h.files)
		h.filesW.Close()
	}()
	var err error
	select {
	case err = <-h.done:
		h.reaped = true
	case <-ctx.Done():
		return fmt.Errorf("%w: filling /work: %w", oci.ErrRuntime, ctx.Err())
	}
	if err == nil {
		return nil
	}
	b := make([]byte, 4096)
	n, _ := h.stderr.ReadAt(b, 0)
	msg := strings.TrimSpace(string(b[:n]))
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 2:
		return fmt.Errorf("%w: %s", oci.ErrInvalidRequest, msg)
	case msg != "":
		return fmt.Errorf("%w: fill helper: %s (%v)", oci.ErrRuntime, msg, err)
	default:
		return fmt.Errorf("%w: fill helper: %v", oci.ErrRuntime, err)
	}
}

// writeCgroupProc moves process pid into the cgroup directory dir.
func writeCgroupProc(dir string, pid int) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.Itoa(pid))
	return errors.Join(err, f.Close())
}

// writeFileStream writes files to w for the helper: per file, the path's
// length (uint32), the path, the mode (uint32), the data's length
// (uint64) and the data.
func writeFileStream(w io.Writer, files []api.File) error {
	bw := bufio.NewWriter(w)
	for _, f := range files {
		var hdr [8]byte
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(f.Path)))
		bw.Write(hdr[:4])
		bw.WriteString(f.Path)
		binary.BigEndian.PutUint32(hdr[:4], uint32(f.Mode))
		bw.Write(hdr[:4])
		binary.BigEndian.PutUint64(hdr[:], uint64(len(f.Data)))
		bw.Write(hdr[:])
		if _, err := bw.Write(f.Data); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// readFile reads one file of writeFileStream's; io.EOF at the end. The
// stream is the server's own (the helper's parent), and lengths are
// checked against the caps of a request all the same.
func readFile(r io.Reader) (api.File, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return api.File{}, err // io.EOF: no more files
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n > 4096 {
		return api.File{}, fmt.Errorf("file stream: a path of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return api.File{}, fmt.Errorf("file stream: %w", err)
	}
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return api.File{}, fmt.Errorf("file stream: %w", err)
	}
	mode := fs.FileMode(binary.BigEndian.Uint32(hdr[:4]))
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return api.File{}, fmt.Errorf("file stream: %w", err)
	}
	size := binary.BigEndian.Uint64(hdr[:])
	if size > 1<<31 {
		return api.File{}, fmt.Errorf("file stream: a file of %d bytes", size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return api.File{}, fmt.Errorf("file stream: %w", err)
	}
	return api.File{Path: string(p), Mode: mode, Data: data}, nil
}

// fillChild is the fill helper (see fillArg).
func fillChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, api.ErrInvalid) {
			return 2
		}
		return 1
	}
	goR := os.NewFile(3, "go")
	var b [1]byte
	if n, _ := goR.Read(b[:]); n != 1 {
		return 125 // closed without a go-ahead: the run was destroyed
	}
	goR.Close()
	if len(os.Args) != 5 {
		return fail(errors.New("sandcell-fill: want UID GID TREE"))
	}
	uid, err1 := strconv.Atoi(os.Args[2])
	gid, err2 := strconv.Atoi(os.Args[3])
	if err := errors.Join(err1, err2); err != nil {
		return fail(err)
	}
	// Like every process of a sandbox: the host's OOM killer takes it
	// first (see Spec's oomScore).
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	work := os.NewFile(4, "work")
	defer work.Close() // referenced until the end: a finalizer would close fd 4
	if os.Args[4] == "1" {
		tree := os.NewFile(6, "tree")
		err := treeFiller(tree, work, uid, gid)
		tree.Close()
		if err != nil {
			return fail(fmt.Errorf("filling /work from the session: %w", err))
		}
	}
	// os.Root refuses paths that leave /work, symlinks included (see
	// fillWork): the tree it holds came from the session.
	root, err := os.OpenRoot("/proc/self/fd/4")
	if err != nil {
		return fail(fmt.Errorf("%w: %w", oci.ErrRuntime, err))
	}
	defer root.Close()
	stream := bufio.NewReaderSize(os.NewFile(5, "files"), 256<<10)
	for {
		f, err := readFile(stream)
		if err == io.EOF {
			return 0
		}
		if err != nil {
			return fail(fmt.Errorf("%w: %w", oci.ErrRuntime, err))
		}
		if err := oci.WriteFile(root, f, uid, gid); err != nil {
			return fail(err)
		}
	}
}
