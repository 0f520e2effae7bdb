package backend

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend/zygote"
)

// Every run has an init of its own as PID 1 of its pid namespace
// (zygote/runinit.c, issue #37): the program is its child, so the signals
// it sends itself act as on a host (the kernel drops those an init sends
// itself), orphans are reaped, and the init hands sandcell the program's
// wait status. The fork server's child becomes that init after its
// set-up (zygote.c); a run libcontainer starts execs it (a tiny
// executable made from the same C code, in a sealed memfd) in place of
// the program (underInit).

// programStatus is how the run's program ended: the wait status its init
// wrote on status (a socket or pipe only the init held, read once the
// init is reaped, so everything it wrote is there), or init's own status
// ws when there is none (init was killed: a timeout, the cgroup's kill;
// the program never started). The program never holds status, so it
// cannot forge the verdict. A nil status gives ws.
func programStatus(ws syscall.WaitStatus, status *os.File) syscall.WaitStatus {
	if status == nil {
		return ws
	}
	rc, err := status.SyscallConn()
	if err != nil {
		return ws
	}
	var buf [8]byte
	n := 0
	_ = rc.Read(func(fd uintptr) bool {
		n, _ = unix.Read(int(fd), buf[:])
		return true // never wait: init is gone
	})
	if n != 5 || buf[0] != zygote.Status {
		return ws
	}
	return syscall.WaitStatus(int32(le32(buf[1:5])))
}

// initCode is the run's init for runs libcontainer starts (zygote.InitELF),
// made once.
var initCode = sync.OnceValues(zygote.InitELF)

// initExe is initCode in a sealed memfd of its own for one run (a few
// system calls: it is a few KiB): no run can write it (CVE-2019-5736
// rewrote the binary a container's init ran from), and none reaches
// sandcell's own binary through /proc/1/exe. Nothing is held between
// runs.
func initExe() (*os.File, error) {
	code, err := initCode()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	fd, err := unix.MemfdCreate("sandcell-init", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // before Linux 6.3: no MFD_EXEC, and none needed
		fd, err = unix.MemfdCreate("sandcell-init", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: memfd for the run's init: %w", oci.ErrRuntime, err)
	}
	f := os.NewFile(uintptr(fd), "sandcell-init")
	const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err = f.Write(code); err == nil {
		if err = f.Chmod(0o555); err == nil {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: memfd for the run's init: %w", oci.ErrRuntime, err)
	}
	return f, nil
}

// underInit makes libcontainer's Process p start the run's init, which
// forks and execs p's program: its argv becomes
// /proc/self/fd/EXE zygote.InitArg EXE ARGV... with EXE (initExe) and the write end of the status pipe passed after the
// program's own extra files (the init closes both in the program). It
// returns the pipe's read end for programStatus and started, which closes
// sandcell's copies of the write end and EXE once libcontainer has started
// init.
//
// With agent set, p has no program: the init runs in agent mode
// (sc_init_agent) with agent, its control socket, in the status pipe's
// place; status is nil, and started closes sandcell's copy of agent.
func underInit(p *libcontainer.Process, agent *os.File) (status *os.File, started func(), err error) {
	exe, err := initExe()
	if err != nil {
		return nil, nil, err
	}
	if agent != nil {
		p.Args = nil
		first := strconv.Itoa(3 + len(p.ExtraFiles))
		p.Args = []string{"/proc/self/fd/" + first, zygote.InitArg, first}
		p.ExtraFiles = slices.Concat(p.ExtraFiles, []*os.File{exe, agent})
		return nil, func() {
			agent.Close()
			exe.Close()
		}, nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		exe.Close()
		return nil, nil, fmt.Errorf("%w: status pipe of the run's init: %w", oci.ErrRuntime, err)
	}
	status = os.NewFile(uintptr(fds[0]), "init status")
	w := os.NewFile(uintptr(fds[1]), "init status")
	first := strconv.Itoa(3 + len(p.ExtraFiles))
	p.Args = slices.Concat([]string{"/proc/self/fd/" + first, zygote.InitArg, first}, p.Args)
	p.ExtraFiles = slices.Concat(p.ExtraFiles, []*os.File{exe, w})
	return status, func() {
		w.Close()
		exe.Close()
	}, nil
}

// countInit raises spec's process limits (the cgroup's pids.max,
// RLIMIT_NPROC where it stands in for it) by one, the run's init: the
// program may start as many processes as the request says, as it could
// when it was PID 1 itself.
func countInit(spec *specs.Spec) {
	if r := spec.Linux.Resources; r != nil && r.Pids != nil && r.Pids.Limit != nil && *r.Pids.Limit > 0 {
		l := *r.Pids.Limit + 1
		r.Pids = &specs.LinuxPids{Limit: &l}
	}
	for i, l := range spec.Process.Rlimits {
		if l.Type == "RLIMIT_NPROC" && l.Hard < 1<<62 {
			spec.Process.Rlimits[i].Soft, spec.Process.Rlimits[i].Hard = l.Soft+1, l.Hard+1
		}
	}
}

// underGVisorInit makes a gVisor run's spec start the run's init. runsc
// passes no fd into its sandbox but stdio, so neither can the executable
// be a memfd nor its status a pipe, and a bind mount needs a mountpoint in
// the read-only root (runsc's gofer makes it there): so both are files in
// the run's /work (writeGVisorInit), under names drawn at random: the
// executable and a status file, which the init opens and then unlinks
// with its executable before it starts the program (runinit.c). It
// returns the two names.
func underGVisorInit(spec *specs.Spec) ([]string, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	tag := hex.EncodeToString(rnd[:])
	names := []string{".sandcell-init-" + tag, ".sandcell-status-" + tag}
	dir := oci.WorkDir + "/"
	spec.Process.Args = slices.Concat([]string{dir + names[0], zygote.InitArg, dir + names[1]}, spec.Process.Args)
	countInit(spec)
	return names, nil
}

// writeGVisorInit writes the files underGVisorInit named into the run's
// /work once it is filled (a fill wants it empty) and before the program
// starts: the executable (root's, mode 0555) and the status file of the
// sandbox's uid (uid, gid), which it returns open for programStatus. The
// program finds neither. /work's tmpfs is grown by what they take (a few
// pages), so a /work filled to its quota still has room for them; the
// status file holds its 5 bytes from the start (zeros: no status), so the
// init's write needs no new page when the program has filled /work.
func writeGVisorInit(work string, names []string, uid, gid uint32, workSize int64) (*os.File, error) {
	code, err := initCode()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	const page = 4096
	slack := (int64(len(code))+page-1)/page*page + page
	if err := unix.Mount("", work, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, "size="+strconv.FormatInt(workSize+slack, 10)); err != nil {
		return nil, fmt.Errorf("%w: room in /work for the run's init: %w", oci.ErrRuntime, err)
	}
	root, err := os.OpenRoot(work)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer root.Close()
	write := func(name string, data []byte, mode os.FileMode) (*os.File, error) {
		f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return nil, err
		}
		if _, err = f.Write(data); err == nil {
			_, err = f.Seek(0, 0)
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	exe, err := write(names[0], code, 0o555)
	if err != nil {
		return nil, fmt.Errorf("%w: the run's init in /work: %w", oci.ErrRuntime, err)
	}
	exe.Close()
	status, err := write(names[1], make([]byte, 5), 0o600)
	if err == nil {
		if err = status.Chown(int(uid), int(gid)); err != nil {
			status.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: the run's init status in /work: %w", oci.ErrRuntime, err)
	}
	return status, nil
}
