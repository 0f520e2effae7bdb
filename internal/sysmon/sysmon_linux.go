// Package sysmon takes most of the Go runtime's sysmon thread off every
// run's CPU bill on hosts where a thread's sleep and wake-up is costly,
// and keeps that change away from the programs sandcell runs.
//
// Why. sysmon is the runtime's housekeeping thread: it retakes Ps from
// goroutines blocked in system calls, preempts goroutines that run for
// more than 10 ms and polls the network when no P does. While any P is
// busy it sleeps 20 µs at a time; it parks once every P is idle, and the
// next system call any goroutine makes wakes it again
// (runtime.entersyscall), back at 20 µs. A sandbox server makes dozens of
// short system calls per run, so sysmon cycles at 20 µs through the busy
// part of every run. On a virtual machine each of those sleeps costs a
// timer interrupt and a halt of the vCPU: 32-37 µs of CPU per 20 µs
// nanosleep on this project's 2-vCPU VM host, 14-17 of them per fresh
// run, 0.4-0.7 ms of a run's 6 ms (BENCHMARKS.md, "sysmon").
//
// What it does. Slow gives sysmon's thread a timer slack
// (/proc/<tid>/timerslack_ns, as prctl(PR_SET_TIMERSLACK) would): each of
// its 20 µs sleeps may then last up to the slack, so it wakes about once
// per slack while the process is busy. Its duties tolerate that, as its
// own back-off already stretches its period to 10 ms when nothing
// happens: a P held by a goroutine in a system call is retaken after at
// most the slack (that matters only when every P is in a system call and
// work waits), a goroutine running for 10 ms is preempted at most a slack
// later. Timers are not sysmon's: a Go timer fires on a P, whose thread
// keeps its slack, except a thread sysmon started (below), on which a
// timer may fire up to the slack late.
//
// What it must not change. A thread's slack is inherited by the threads
// and processes it creates and kept across execve. A program in a sandbox
// must see the slack it would see without sandcell's change: the one this
// process started with (Orig). sysmon starts an OS thread when it hands a
// P to a new M, and that thread inherits sysmon's slack, so any thread of
// the process may carry it. Every place that starts a process that runs a
// user's program therefore forks from a thread whose slack is Orig:
// WithOrigSlack around the start, or SetOrig on a locked spawner thread
// (the fork server's, the runsc holders'). TestProgramsSeeOrigSlack (oci)
// checks each isolation from a thread that carries the slack.
package sysmon

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/internal/owner"
)

// Env sets the slack Slow gives sysmon (a Go duration; 0 leaves sysmon
// alone). Default 1 ms: on this host 4 ms saved a little more, and 1 ms
// already takes sysmon from 0.4-0.7 to 0.14-0.19 ms of CPU per run while
// a P stuck behind system calls still waits at most a millisecond.
const Env = "SANDCELL_SYSMON_SLACK"

// DefaultSlack is the slack without Env.
const DefaultSlack = time.Millisecond

// orig is the main thread's slack when the process started: package
// initialisation runs on the main thread (the runtime locks it there).
var orig = func() uint64 {
	v, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || v <= 0 {
		return 0
	}
	return uint64(v)
}()

// Orig is the timer slack (ns) this process started with, which the
// programs it runs must get; 0 when it could not be read (nothing is then
// changed: Slow refuses).
func Orig() uint64 { return orig }

var slowed struct {
	once sync.Once
	tid  int
	err  error
}

// Slow gives sysmon's thread the slack of Env (DefaultSlack without it),
// once per process: later calls return the first one's outcome. It
// returns sysmon's thread id, or 0 and why nothing changed: Env is 0, the
// thread could not be told apart with certainty, or the write was refused
// (it needs CAP_SYS_NICE in the process's user namespace: root, or the
// root of a rootless sandcell's own namespace).
func Slow() (int, error) {
	slowed.once.Do(func() {
		slack := DefaultSlack
		if v := os.Getenv(Env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				slowed.err = fmt.Errorf("%s=%q: want a duration such as 1ms, or 0", Env, v)
				return
			}
			slack = d
		}
		if slack == 0 {
			slowed.err = fmt.Errorf("%s=0: sysmon left alone", Env)
			return
		}
		if orig == 0 {
			slowed.err = errors.New("this thread's timer slack could not be read")
			return
		}
		slowed.tid, slowed.err = find()
		if slowed.err != nil {
			return
		}
		if err := os.WriteFile("/proc/"+strconv.Itoa(slowed.tid)+"/timerslack_ns", []byte(strconv.FormatInt(int64(slack), 10)), 0); err != nil {
			slowed.tid, slowed.err = 0, fmt.Errorf("set sysmon's timer slack: %w", err)
		}
	})
	return slowed.tid, slowed.err
}

// find returns sysmon's thread id. sysmon is the first thread the runtime
// starts (runtime.main, before any package's init), so it is the oldest
// thread after the main one: by start time (clock ticks), then, among
// threads of the same tick, by the order the kernel handed their ids out,
// which is cyclic (ids wrap at pid_max, 32768 on many hosts): the distance
// from the main thread's id modulo pid_max. Before it is trusted, its
// current system call must be sysmon's: a nanosleep (its 20 µs polling),
// or a futex wait with a timeout (its park until the next timer). An idle M waits in a futex
// without one, a poller in epoll_pwait. Anything else, a few times in a
// row, and nothing is changed.
func find() (int, error) {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, err
	}
	var ts []thread
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == self {
			continue
		}
		start, err := owner.StartTime(tid)
		if err != nil {
			continue // gone meanwhile
		}
		ts = append(ts, thread{tid, start})
	}
	if len(ts) == 0 {
		return 0, errors.New("no runtime thread besides the main one")
	}
	pidMax := 1 << 22 // the kernel's ceiling
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
			pidMax = v
		}
	}
	tid := oldest(ts, self, pidMax)
	var last string
	for range 20 {
		call, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
		if err != nil {
			return 0, err
		}
		last = strings.TrimSpace(string(call))
		if sysmonCall(last) {
			return tid, nil
		}
		// Running, or caught between two sleeps: look again.
		time.Sleep(100 * time.Microsecond)
	}
	return 0, fmt.Errorf("thread %d does not look like sysmon (its system call: %q)", tid, last)
}

type thread struct {
	tid   int
	start uint64
}

// oldest is the thread of ts started first after the main thread self: by
// start time, then by the distance of its id from self's, modulo pidMax.
func oldest(ts []thread, self, pidMax int) int {
	after := func(tid int) int { return ((tid-self)%pidMax + pidMax) % pidMax }
	return slices.MinFunc(ts, func(a, b thread) int {
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		return cmp.Compare(after(a.tid), after(b.tid))
	}).tid
}

// sysmonCall tells whether a /proc/<tid>/syscall line ("NR a1 a2 a3 a4 a5
// a6 sp pc") is one of sysmon's waits: nanosleep, or futex with a timeout
// (its fourth argument, a pointer, not 0).
func sysmonCall(line string) bool {
	f := strings.Fields(line)
	if len(f) < 5 {
		return false // "running", or "-1 sp pc" outside a system call
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	switch nr {
	case unix.SYS_NANOSLEEP:
		return true
	case unix.SYS_FUTEX:
		return f[4] != "0x0"
	}
	return false
}

// SetOrig gives the calling thread the slack the process started with.
// The caller holds its thread (runtime.LockOSThread) for as long as that
// matters: a spawner thread that forks every process of one kind.
func SetOrig() error {
	if orig == 0 {
		return nil // never read, so never changed either
	}
	return unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(orig), 0, 0, 0)
}

// WithOrigSlack runs start, which forks a process (exec.Cmd.Start,
// libcontainer's Start), on a locked thread whose slack is the process's
// original one, so the process inherits that and not sysmon's. It costs
// a prctl when the thread has the original already, three when not.
func WithOrigSlack(start func() error) error {
	if orig == 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cur, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || cur <= 0 || uint64(cur) == orig {
		return start()
	}
	if err := SetOrig(); err != nil {
		return fmt.Errorf("timer slack for a new process: %w", err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(cur), 0, 0, 0) //nolint:errcheck // back to what the thread had
	return start()
}
