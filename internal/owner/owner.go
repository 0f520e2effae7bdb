// Package owner names the process that made something on the host (a
// sandcell instance's state, cgroups and mounts; a session's temporary
// tree) in a form that any other process can check, without a directory
// the two share: the pid, the process's start time and its pid namespace.
//
// Invariant: Token.Dead reports true only when the named process provably
// no longer exists. Start-up recovery removes only what a dead token
// names, so that one sandcell instance never kills the runs, nor removes
// the state, mounts or cgroups, of another that is alive, whatever their
// state directories, users or cgroup parents (issue #17: a `sandcell
// --state-dir X run` killed a running server's sandboxes).
//
// A pid alone is no proof: pids are reused. The start time (field 22 of
// /proc/PID/stat, clock ticks since boot) tells a reused pid from the
// original, and the pid namespace says which processes' pids these are.
// What cannot be checked is never dead: a token of another pid namespace
// (a sandcell in a container next to one on the host), one whose process
// /proc hides (hidepid), or one seen from another time namespace (which
// shifts start times).
package owner

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Token names one process.
type Token struct {
	PID   int
	Start uint64 // start time, clock ticks since boot (/proc/PID/stat field 22)
	PIDNS uint64 // inode of the pid namespace the pid is in
}

var self struct {
	once sync.Once
	tok  Token
	err  error
}

// Self is this process's token.
func Self() (Token, error) {
	self.once.Do(func() {
		pid := os.Getpid()
		t := Token{PID: pid}
		if t.Start, self.err = StartTime(pid); self.err != nil {
			return
		}
		if t.PIDNS, self.err = nsInode("self", "pid"); self.err != nil {
			return
		}
		self.tok = t
	})
	return self.tok, self.err
}

// String is the token as it goes into names: "PID.START.PIDNS", decimal,
// so that it is a valid path element, cgroup name and container id.
func (t Token) String() string {
	return strconv.Itoa(t.PID) + "." + strconv.FormatUint(t.Start, 10) + "." + strconv.FormatUint(t.PIDNS, 10)
}

// Parse reads a token written by String; ok is false for anything else.
func Parse(s string) (Token, bool) {
	f := strings.Split(s, ".")
	if len(f) != 3 {
		return Token{}, false
	}
	var nums [3]uint64
	for i, v := range f {
		// Digits only: no sign, no spaces, no leading zeros but "0".
		if v == "" || len(v) > 20 || (len(v) > 1 && v[0] == '0') || strings.Trim(v, "0123456789") != "" {
			return Token{}, false
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return Token{}, false
		}
		nums[i] = n
	}
	if nums[0] == 0 || nums[0] > 1<<22 { // PID_MAX_LIMIT
		return Token{}, false
	}
	return Token{PID: int(nums[0]), Start: nums[1], PIDNS: nums[2]}, true
}

// Dead reports whether the process t names provably no longer exists (see
// the package doc); false means it is alive or that this process cannot
// tell.
func (t Token) Dead() bool {
	me, err := Self()
	if err != nil || t.PIDNS != me.PIDNS {
		return false // another pid namespace's pids mean nothing here
	}
	if t == me {
		return false
	}
	if gone(t.PID) {
		return true
	}
	// Someone has the pid: the owner, or a later process that got it.
	start, err := StartTime(t.PID)
	if errors.Is(err, fs.ErrNotExist) {
		// Exited in between, or hidden from this user (hidepid): only
		// the first is proof.
		return gone(t.PID)
	}
	if err != nil || !sameTimeNS(t.PID) {
		return false
	}
	return start != t.Start
}

// gone reports whether no process has pid in this pid namespace: kill(2)
// with signal 0 says ESRCH (EPERM means it exists, another user's).
func gone(pid int) bool {
	return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

// StartTime reads field 22 of /proc/PID/stat: clock ticks since boot when
// process (or thread) pid started.
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStart(b)
}

// parseStart reads the start time from the contents of /proc/PID/stat:
// the fields after the command name, whose closing parenthesis is the
// last one (the name may contain spaces and parentheses), are the state
// (field 3) onwards, so the start time is the 20th of them.
func parseStart(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("owner: malformed /proc stat %q", truncate(stat))
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("owner: short /proc stat %q", truncate(stat))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// nsInode is the inode of /proc/PID/ns/KIND ("self" for this process).
func nsInode(pid, kind string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+pid+"/ns/"+kind, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// sameTimeNS reports whether process pid is in this process's time
// namespace, so that the start times /proc shows of both are shifted
// alike (time_namespaces(7)). A kernel without time namespaces has no
// ns/time link: every process is in the same one.
func sameTimeNS(pid int) bool {
	mine, err := nsInode("self", "time")
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	theirs, err2 := nsInode(strconv.Itoa(pid), "time")
	return err == nil && err2 == nil && mine == theirs
}

// Names. A name made by NewName is this process's token and a number
// unique within the process: "4242.98765.4026531836.1". Every runtime of
// sandcell names its instance this way (oci's runc instances, whose
// container ids and so cgroups start with it; wasm's), so that recovery,
// whichever runtime does it, can tell from a name alone whether its owner
// still lives, and one process's instances never share a name.

var nameSeq atomic.Uint64

// NewName names a new thing of this process (see Names).
func NewName() (string, error) {
	tok, err := Self()
	if err != nil {
		return "", err
	}
	return tok.String() + "." + strconv.FormatUint(nameSeq.Add(1), 10), nil
}

// NameOwner reads the owner's token from a name; ok is false for a name
// not made by NewName (an older sandcell's random names, or anything
// else).
func NameOwner(name string) (Token, bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return Token{}, false
	}
	if n, err := strconv.ParseUint(name[i+1:], 10, 64); err != nil || n == 0 || name[i+1] == '0' {
		return Token{}, false
	}
	return Parse(name[:i])
}

// DeadName reports whether name's owner provably no longer lives. A name
// without a token is never judged dead this way.
func DeadName(name string) bool {
	tok, ok := NameOwner(name)
	return ok && tok.Dead()
}
