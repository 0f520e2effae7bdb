//go:build linux

// Package zygote is sandcell's fork server: a small C program linked into
// the sandcell binary (zygote.c) and the wire format package oci/backend
// uses to drive it. It knows nothing of libcontainer: oci/backend compiles
// a libcontainer config into a Plan, and the zygote's child carries the
// plan out exactly as runc's init does (each C function names the runc
// function it mirrors).
//
// Invariant: the zygote only ever reads requests from the socket sandcell
// gave it; a run's process is a child of sandcell (CLONE_PARENT), never of
// the zygote, and holds none of the zygote's fds. The constructor in
// zygote.c does nothing unless EnvVar is set.
package zygote

/*
#cgo CFLAGS: -Wall -O2
#include <string.h>
#include "zygote.h"
int scz_capture_arm(void);
*/
import "C"

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// EnvVar set to a socket's fd number makes this binary a zygote serving on
// that socket (before Go's runtime starts).
const EnvVar = C.SCZ_ENV

// Limits of one request (the zygote refuses more).
const (
	MaxExtra   = C.SCZ_MAX_EXTRA
	MaxSources = C.SCZ_MAX_SOURCES
	MaxTasks   = C.SCZ_MAX_TASKS
	mapLen     = C.SCZ_MAP_LEN
)

// Bytes the child and sandcell exchange on the child's sync socket.
const (
	Ready = C.SCZ_READY // the child is set up and waits for Go
	Error = C.SCZ_ERROR // followed by a message; the child exits
	Go    = C.SCZ_GO    // exec the program
	// Status and the program's wait status (int32, little-endian): the run's
	// init (runinit.c) writes it once the program has ended.
	Status = C.SCZ_STATUS
)

// InitArg is argv[1] of the run's init started by libcontainer (InitELF).
const InitArg = C.SCZ_INIT_ARG

// A live sandbox's init in agent mode (runinit.c, sc_init_agent): its
// requests and reports, their sizes and bounds (zygote.h).
const (
	AgentSpawn      = C.SCZ_AGENT_SPAWN
	AgentSignal     = C.SCZ_AGENT_SIGNAL
	AgentPTY        = C.SCZ_AGENT_PTY
	AgentSpawned    = C.SCZ_AGENT_SPAWNED
	AgentFailed     = C.SCZ_AGENT_FAILED
	AgentExited     = C.SCZ_AGENT_EXITED
	AgentMaxProcs   = C.SCZ_AGENT_MAX_PROCS
	AgentMaxReq     = C.SCZ_AGENT_MAX_REQ
	AgentMaxStrs    = C.SCZ_AGENT_MAX_STRS
	AgentReqSize    = C.sizeof_struct_sc_agent_req
	AgentReportSize = C.sizeof_struct_sc_agent_msg
)

// InitELF is the run's init (runinit.c) as an executable of its own, for
// the runs libcontainer starts: the freestanding code of this binary's
// "scinit" section in one read-only, executable segment at a fixed
// address, entered at sc_init_entry. No interpreter, no library, no
// relocation: it runs in any root, whether sandcell itself is linked
// statically or not. Its argv: InitArg's comment in runinit.c.
func InitELF() ([]byte, error) {
	var start *C.char
	var n, entry C.long
	C.sc_init_code(&start, &n, &entry)
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if machine == 0 || n <= 0 || entry < 0 || entry >= n {
		return nil, fmt.Errorf("no run's init for %s (code %d bytes, entry %d)", runtime.GOARCH, n, entry)
	}
	code := C.GoBytes(unsafe.Pointer(start), C.int(n))
	const (
		base   = 0x400000
		ehsize = 64
		phsize = 56
	)
	// At the same offset in its page as in this process: the code keeps
	// its alignment, and arm64's page-relative addressing (adrp) its
	// targets.
	codeAt := 0x1000 + int(uintptr(unsafe.Pointer(start))&0xfff)
	b := make([]byte, codeAt+len(code))
	copy(b, []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)})
	le := binary.LittleEndian
	le.PutUint16(b[16:], uint16(elf.ET_EXEC))
	le.PutUint16(b[18:], uint16(machine))
	le.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(b[24:], base+uint64(codeAt)+uint64(entry)) // e_entry
	le.PutUint64(b[32:], ehsize)                            // e_phoff
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], 2) // e_phnum
	ph := func(i int, typ elf.ProgType, flags elf.ProgFlag, size uint64) {
		p := b[ehsize+i*phsize:]
		le.PutUint32(p[0:], uint32(typ))
		le.PutUint32(p[4:], uint32(flags))
		if size > 0 {
			le.PutUint64(p[16:], base) // p_vaddr
			le.PutUint64(p[24:], base) // p_paddr
			le.PutUint64(p[32:], size) // p_filesz
			le.PutUint64(p[40:], size) // p_memsz
			le.PutUint64(p[48:], 0x1000)
		}
	}
	ph(0, elf.PT_LOAD, elf.PF_R|elf.PF_X, uint64(len(b)))
	ph(1, elf.PT_GNU_STACK, elf.PF_R|elf.PF_W, 0) // a stack that is not executable
	copy(b[codeAt:], code)
	return b, nil
}

// Request is the fixed part of a request; its fds travel with it (see
// Encode).
type Request struct {
	// CloneFlags are the CLONE_NEW* flags of clone3 (never
	// CLONE_NEWCGROUP: the child unshares it once in its cgroup).
	CloneFlags uint64
	// Extra is the number of the program's extra files (fds 3...).
	Extra int
	// Sources is the number of bind-mount sources' fds (Mount.Source).
	Sources int
	// Tasks is the number of cgroup v1 "tasks" files the child writes
	// "0" to (joining without the global threadgroup lock).
	Tasks int
	// Cgroup2: the last fd is the run's cgroup v2 directory
	// (CLONE_INTO_CGROUP).
	Cgroup2 bool
	// SetgroupsDeny writes "deny" to the child's setgroups first.
	SetgroupsDeny bool
	// OOMScoreAdj, if set, is written to the child's oom_score_adj.
	OOMScoreAdj *int
	// UIDMap and GIDMap are written to the child's uid_map and gid_map.
	UIDMap, GIDMap string
}

// Encode is the request's bytes (struct scz_request).
func (r *Request) Encode() ([]byte, error) {
	var req C.struct_scz_request
	if r.Extra > MaxExtra || r.Sources > MaxSources || r.Tasks > MaxTasks ||
		len(r.UIDMap) >= mapLen || len(r.GIDMap) >= mapLen {
		return nil, fmt.Errorf("zygote: request too large")
	}
	req.magic = C.SCZ_MAGIC
	req.version = C.SCZ_VERSION
	req.clone_flags = C.uint64_t(r.CloneFlags)
	req.nextra = C.uint32_t(r.Extra)
	req.nsources = C.uint32_t(r.Sources)
	req.ntasks = C.uint32_t(r.Tasks)
	if r.Cgroup2 {
		req.cgroup2 = 1
	}
	if r.SetgroupsDeny {
		req.setgroups_deny = 1
	}
	if r.OOMScoreAdj != nil {
		req.oom_score_adj_set = 1
		req.oom_score_adj = C.int32_t(*r.OOMScoreAdj)
	}
	for i := range len(r.UIDMap) {
		req.uid_map[i] = C.char(r.UIDMap[i])
	}
	for i := range len(r.GIDMap) {
		req.gid_map[i] = C.char(r.GIDMap[i])
	}
	b := C.GoBytes(unsafe.Pointer(&req), C.int(unsafe.Sizeof(req)))
	return b, nil
}

// Reply is the zygote's answer to a request.
type Reply struct {
	Status syscall.Errno // 0: the child was started
	Pid    int           // the child (also when Status is set after clone3)
	Msg    string
}

// ReplySize is the size of a reply message.
const ReplySize = C.sizeof_struct_scz_reply

// DecodeReply reads a reply message.
func DecodeReply(b []byte) (Reply, error) {
	if len(b) != ReplySize {
		return Reply{}, fmt.Errorf("zygote: reply of %d bytes, want %d", len(b), ReplySize)
	}
	var r C.struct_scz_reply
	C.memcpy(unsafe.Pointer(&r), unsafe.Pointer(&b[0]), C.size_t(len(b)))
	msg := C.GoString(&r.msg[0])
	return Reply{Status: syscall.Errno(r.status), Pid: int(r.pid), Msg: msg}, nil
}

// Mount is one mount of the plan, as libcontainer's configs.Mount has it.
type Mount struct {
	Device, Source, Destination, Data string
	Flags, ClearedFlags               uint32
	Propagation                       []uint32
	// SourceFD, if not 0, is the bind's source as the request's
	// SourceFD-th source fd (a detached copy of the source, open_tree),
	// which the child moves into place instead of mounting the path.
	SourceFD uint32
}

// Plan is what the child does, in runc init's order (zygote.c).
type Plan struct {
	Rootfs          string
	RootPropagation uint32
	ReadonlyRootfs  bool
	Mounts          []Mount
	// Devices are host device nodes bind-mounted at the same path.
	Devices    []string
	SetupDev   bool
	Hostname   string
	Domainname string
	// ReadonlyPaths and MaskedPaths apply after the pivot.
	ReadonlyPaths, MaskedPaths []string
	NoNewPrivileges            bool
	// SeccompFlags and SeccompProgram are the filter (see Capture); no
	// program: no filter.
	SeccompFlags   uint32
	SeccompProgram []byte
	// Keyring is the session keyring to join ("" none), KeyringPerm the
	// permission bits added to it.
	Keyring     string
	KeyringPerm uint32
	Loopback    bool
	CgroupNS    bool
	Cwd         string
	Args, Env   []string
	// Path is the PATH argv[0] is looked up in (when it has no slash).
	Path     string
	UID, GID uint32
	// SetGroups clears the supplementary groups before the uid changes
	// (runc's setupUser); SetGroups0 also right after the namespaces are
	// made (nsexec's stage-2, when the gid map is not the caller's own).
	SetGroups, SetGroups0 bool
	Umask                 uint32
}

type planWriter struct{ b []byte }

func (w *planWriter) rec(key C.int, payload []byte) { recAppend(w, key, payload) }

func (w *planWriter) str(key C.int, s string) { recAppend(w, key, s) }

// recAppend appends one record; generic so that a string payload is not
// copied into a []byte first.
func recAppend[T string | []byte](w *planWriter, key C.int, payload T) {
	w.b = binary.LittleEndian.AppendUint32(w.b, uint32(key))
	w.b = binary.LittleEndian.AppendUint32(w.b, uint32(len(payload)))
	w.b = append(w.b, payload...)
	for len(w.b)%4 != 0 {
		w.b = append(w.b, 0)
	}
}

func (w *planWriter) strs(key C.int, list []string) {
	for _, s := range list {
		w.str(key, s)
	}
}

func (w *planWriter) u32(key C.int, v uint32) {
	w.rec(key, binary.LittleEndian.AppendUint32(nil, v))
}

func (w *planWriter) flag(key C.int, v bool) {
	if v {
		w.u32(key, 1)
	}
}

// Encode is the plan's bytes. Strings may not hold NUL bytes.
func (p *Plan) Encode() ([]byte, error) {
	for _, s := range append(append([]string{p.Rootfs, p.Hostname, p.Domainname, p.Keyring, p.Cwd, p.Path}, p.Args...), p.Env...) {
		for i := range len(s) {
			if s[i] == 0 {
				return nil, fmt.Errorf("zygote: a string of the plan holds a NUL byte")
			}
		}
	}
	// A run's plan is about 5 KiB: one allocation, not a dozen doublings.
	w := &planWriter{b: make([]byte, 0, 8<<10)}
	w.str(C.SCZ_P_ROOTFS, p.Rootfs)
	w.u32(C.SCZ_P_ROOTPROP, p.RootPropagation)
	w.flag(C.SCZ_P_READONLYFS, p.ReadonlyRootfs)
	for _, m := range p.Mounts {
		var b []byte
		b = binary.LittleEndian.AppendUint32(b, m.Flags)
		b = binary.LittleEndian.AppendUint32(b, m.ClearedFlags)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Propagation)))
		b = binary.LittleEndian.AppendUint32(b, m.SourceFD)
		strs := []string{m.Device, m.Source, m.Destination, m.Data}
		for _, s := range strs {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		}
		for _, f := range m.Propagation {
			b = binary.LittleEndian.AppendUint32(b, f)
		}
		for _, s := range strs {
			b = append(append(b, s...), 0)
		}
		w.rec(C.SCZ_P_MOUNT, b)
	}
	w.strs(C.SCZ_P_DEVICE, p.Devices)
	w.flag(C.SCZ_P_SETUPDEV, p.SetupDev)
	w.str(C.SCZ_P_HOSTNAME, p.Hostname)
	w.str(C.SCZ_P_DOMAINNAME, p.Domainname)
	w.strs(C.SCZ_P_ROPATH, p.ReadonlyPaths)
	w.strs(C.SCZ_P_MASKPATH, p.MaskedPaths)
	w.flag(C.SCZ_P_NNP, p.NoNewPrivileges)
	if len(p.SeccompProgram) > 0 {
		w.u32(C.SCZ_P_SECCOMP_FLAGS, p.SeccompFlags)
		w.rec(C.SCZ_P_SECCOMP_BPF, p.SeccompProgram)
	}
	if p.Keyring != "" {
		w.str(C.SCZ_P_KEYRING, p.Keyring)
		w.u32(C.SCZ_P_KEYPERM, p.KeyringPerm)
	}
	w.flag(C.SCZ_P_LOOPBACK, p.Loopback)
	w.flag(C.SCZ_P_CGROUPNS, p.CgroupNS)
	w.str(C.SCZ_P_CWD, p.Cwd)
	w.strs(C.SCZ_P_ARG, p.Args)
	w.strs(C.SCZ_P_ENV, p.Env)
	w.str(C.SCZ_P_PATH, p.Path)
	w.u32(C.SCZ_P_UID, p.UID)
	w.u32(C.SCZ_P_GID, p.GID)
	w.flag(C.SCZ_P_SETGROUPS, p.SetGroups)
	w.flag(C.SCZ_P_SETGROUPS0, p.SetGroups0)
	w.u32(C.SCZ_P_UMASK, p.Umask)
	w.rec(C.SCZ_P_END, nil)
	return w.b, nil
}

// ArmCapture makes the calling thread's next seccomp program load write
// the program to stdout (see DecodeCapture) and end the process, instead
// of loading it. The caller must hold its OS thread (runtime.LockOSThread)
// and be a process of its own: the SIGSYS handler replaces Go's.
func ArmCapture() error {
	if e := C.scz_capture_arm(); e != 0 {
		return fmt.Errorf("zygote: arm the seccomp capture: %w", syscall.Errno(e))
	}
	return nil
}

// DecodeCapture reads what a capture wrote: the seccomp(2) flags of the
// load (0: loaded with prctl) and the program (struct sock_filter[]).
func DecodeCapture(b []byte) (flags uint32, program []byte, err error) {
	if len(b) < 12 || binary.LittleEndian.Uint32(b) != C.SCZ_BPF_MAGIC {
		return 0, nil, fmt.Errorf("zygote: no seccomp program captured (%d bytes)", len(b))
	}
	flags = binary.LittleEndian.Uint32(b[4:])
	n := int(binary.LittleEndian.Uint32(b[8:]))
	if n == 0 || len(b) != 12+8*n {
		return 0, nil, fmt.Errorf("zygote: captured %d bytes for %d instructions", len(b)-12, n)
	}
	return flags, b[12:], nil
}
