package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Reliability of the real server, through the official Go SDK client: a
// server killed with SIGKILL while runs are in flight leaves nothing behind
// once a new one starts on the same state, and loses no session file saved
// before; under load no call is lost, a refused call says when to retry, and
// the server's memory and descriptors stay bounded. The figures these tests
// log are the ones recorded in RELIABILITY.md. Like every real-sandbox test
// they must run alone on the host (flock /work/sandbox-tests.lock): they
// look at processes, cgroups and mounts host-wide.

// The sandboxes' host uids: the default --uid-base and its 65536 ids.
const (
	sandboxUIDFirst = 100000
	sandboxUIDLast  = 165535
)

// TestReliabilityCrashRecovery: kill -9 the server while 10 runs (3 in
// sessions, 7 one-shot) are in their program; a server started on the
// same state dir, sessions dir and cgroup parent removes every process,
// cgroup, mount and instance directory the dead one left, and every file
// the sessions saved before the crash reads back exactly.
func TestReliabilityCrashRecovery(t *testing.T) {
	ctx := ctxFor(t, 5*time.Minute)
	dir := sessionsDir(t)
	// 10 slots, so that all 10 runs are in their program at once.
	cmd := sandcellCommandWith(t, []string{"--sessions-dir", dir, "--max-runs", "10", "--max-queue", "8"})
	state, parent := flagValue(cmd, "--state-dir"), cgroupParentOf(cmd)
	baseline := sandboxProcs() // someone else's, if any: not ours to judge
	for _, p := range baseline {
		t.Logf("before the test, a process in the sandbox uid range: %s", p)
	}

	c := connect(t, ctx, cmd, nil, "2025-11-25")
	serverPID := cmd.Process.Pid

	// Three sessions with known files: notes.txt from write_file; made.txt
	// and sub/seq.txt from a run (whose source is not kept: issue #17).
	sessions := make([]string, 3)
	want := map[string]map[string]string{} // session -> path -> content
	var seq strings.Builder
	for n := 1; n <= 1000; n++ {
		fmt.Fprintf(&seq, "%d\n", n)
	}
	for i := range sessions {
		sess := c.createSession(ctx, "sh")
		sessions[i] = sess
		notes := fmt.Sprintf("session %d: written by write_file\nline 2\n", i)
		if res := c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "notes.txt", "content": notes}); res.IsError {
			t.Fatalf("write_file: %s", text(res))
		}
		src := fmt.Sprintf("printf 'session %d: made by a run\\n' > made.txt && mkdir -p sub && seq 1 1000 > sub/seq.txt", i)
		r := c.run(ctx, "execute_code", map[string]any{"session_id": sess, "language": "sh", "source": src})
		if r.Status != "ok" {
			t.Fatalf("run in session %d: %+v", i, r)
		}
		want[sess] = map[string]string{
			"notes.txt":   notes,
			"made.txt":    fmt.Sprintf("session %d: made by a run\n", i),
			"sub/seq.txt": seq.String(),
		}
	}
	before, err := stateEntries(state)
	if err != nil || len(before) != 1 {
		t.Fatalf("state dir %s before the crash: %v %v, want one instance directory", state, before, err)
	}
	dead := before[0]

	// 10 runs in flight: each writes to /work and sleeps. The session runs
	// also change a saved file, which must come back unchanged.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		callErrs = make([]error, 10)
		returned int
	)
	for i := range 10 {
		args := map[string]any{"language": "sh", "timeout_ms": 60000,
			"source": fmt.Sprintf("echo in flight %d > inflight.txt; echo changed >> notes.txt; sleep 30", i)}
		if i < len(sessions) {
			args["session_id"] = sessions[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: args})
			if err == nil {
				b, _ := json.Marshal(res.StructuredContent)
				err = fmt.Errorf("a result, where the server was to be killed first: %s", b)
			}
			mu.Lock()
			callErrs[i] = err
			returned++
			mu.Unlock()
		}()
	}
	callsReturned := func() int {
		mu.Lock()
		defer mu.Unlock()
		return returned
	}
	// All 10 are running: 10 cgroups under the parent, and 10 sleeps in
	// the sandbox uid range inside them.
	memParent := filepath.Join("/sys/fs/cgroup/memory", parent)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		memParent = filepath.Join("/sys/fs/cgroup", parent) // cgroup v2
	}
	err = eventually(60*time.Second, func() error {
		if callsReturned() > 0 {
			return nil // a run ended before the kill: reported below
		}
		if n := len(children(memParent)); n != 10 {
			return fmt.Errorf("%d run cgroups under %s", n, memParent)
		}
		if n := countSleeps(ours(sandboxProcs(), parent)); n != 10 {
			return fmt.Errorf("%d sleeps running", n)
		}
		return nil
	})
	if n := callsReturned(); n > 0 {
		mu.Lock()
		for i, err := range callErrs {
			if err != nil {
				t.Logf("call %d: %v", i, err)
			}
		}
		mu.Unlock()
		t.Fatalf("%d of the 10 runs ended before the server was killed (above); see TestReliabilityConcurrentStarts", n)
	}
	if err != nil {
		dumpGoroutines(t, serverPID)
		t.Fatalf("the 10 runs did not all start: %v", err)
	}
	inFlight := ours(sandboxProcs(), parent)
	mountsBefore := mountsBelow(t, state)
	t.Logf("in flight: %d cgroups, %d sandbox processes (children: %s), %d mounts under the state dir",
		len(children(memParent)), len(inFlight), parents(inFlight, serverPID), len(mountsBefore))

	// kill -9.
	killed := time.Now()
	if err := syscall.Kill(serverPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := eventually(10*time.Second, func() error {
		if err := syscall.Kill(serverPID, 0); err == nil || !errors.Is(err, syscall.ESRCH) {
			if st, _ := procState(serverPID); st != "Z" { // a zombie has died; its reaper is the SDK
				return fmt.Errorf("server %d still alive (state %q)", serverPID, st)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// What the death leaves before anything cleans up. The runs die with
	// the server: they were started by its fork server (the default),
	// whose keeper holds a pidfd of each and SIGKILLs them when the
	// server's process is gone (SECURITY.md, "The fork server"). Before
	// the keeper they ran on, re-parented, past their wall-clock limit
	// (the server's timer enforced it) until the next start's Recover.
	if err := eventually(5*time.Second, func() error {
		if left := ours(sandboxProcs(), parent); len(left) > 0 {
			return fmt.Errorf("%d sandbox processes alive: %v", len(left), left)
		}
		return nil
	}); err != nil {
		left := ours(sandboxProcs(), parent)
		t.Errorf("5 s after SIGKILL, %d sandbox processes of the dead server still run (children: %s): %v", len(left), parents(left, serverPID), left)
	} else {
		t.Logf("every sandbox process of the dead server was gone %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("calls in flight did not return 30 s after the server died")
	}
	for i, err := range callErrs { // no lock: every call has returned
		if err == nil || strings.Contains(err.Error(), "a result, where the server") {
			t.Errorf("call %d in flight: %v", i, err)
		}
	}
	c.cs.Close()
	leftCgroups := cgroupChildren(parent)
	leftMounts := mountsBelow(t, state)
	leftState, _ := stateEntries(state)
	t.Logf("left by the dead server: %d cgroup dirs (all hierarchies), %d mounts under the state dir, state dir entries %v",
		len(leftCgroups), len(leftMounts), leftState)
	if len(leftCgroups) == 0 || len(leftMounts) == 0 || !slices.Contains(leftState, dead) {
		t.Logf("(expected leftovers to clean up; the recovery below is then tested on less)")
	}
	// A save interrupted by the crash leaves a files.new-* tree beside the
	// session's files (the swap is atomic, so it is always discardable):
	// plant one, as a save killed mid-copy would.
	planted := filepath.Join(dir, sessions[0], "files.new-crashtest")
	if err := os.MkdirAll(filepath.Join(planted, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(planted, "notes.txt"), []byte("half-saved\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Restart on the same state dir, sessions dir and cgroup parent.
	restarted := time.Now()
	c = connect(t, ctx, sameServer(t, cmd), nil, "2025-11-25")
	defer c.cs.Close()
	t.Logf("restarted server answered tools/list %v after start", time.Since(restarted).Round(time.Millisecond))
	var firstLeft error
	if err := eventually(15*time.Second, func() error {
		var problems []string
		for _, p := range sandboxProcs() {
			if !slices.ContainsFunc(baseline, func(b procInfo) bool { return b.pid == p.pid }) {
				problems = append(problems, "process "+p.String())
			}
		}
		for _, cg := range cgroupChildren(parent) {
			problems = append(problems, "cgroup "+cg)
		}
		for _, m := range mountsBelow(t, state) {
			problems = append(problems, "mount "+m)
		}
		entries, err := stateEntries(state)
		if err != nil || len(entries) != 1 || entries[0] == dead {
			problems = append(problems, fmt.Sprintf("state dir entries %v (%v), want only the new instance (the dead one was %s)", entries, err, dead))
		}
		if tmp, _ := filepath.Glob(filepath.Join(dir, "*", "files.new-*")); len(tmp) > 0 {
			problems = append(problems, fmt.Sprintf("temp trees %v", tmp))
		}
		if len(problems) > 0 {
			err := errors.New(strings.Join(problems, "; "))
			if firstLeft == nil {
				firstLeft = err
			}
			return err
		}
		return nil
	}); err != nil {
		t.Errorf("15 s after the restart, left behind: %v", err)
	} else {
		t.Logf("restarted server: no sandbox process, cgroup, mount, dead instance dir or temp tree left %v after start", time.Since(restarted).Round(time.Millisecond))
	}
	if firstLeft != nil {
		t.Logf("(at the first look after the restart: %s)", trunc(firstLeft.Error()))
	}

	// Every file saved before the crash is intact; what the killed runs
	// wrote is gone with them.
	for _, sess := range sessions {
		for p, w := range want[sess] {
			if got, res := c.readFile(ctx, sess, p); got != w {
				t.Errorf("after kill -9, %s %s = %q (%s), want %q", sess, p, trunc(got), text(res), trunc(w))
			}
		}
		if got, res := c.readFile(ctx, sess, "inflight.txt"); !res.IsError {
			t.Errorf("%s: inflight.txt of a run killed before its save exists: %q", sess, got)
		}
		r := c.run(ctx, "run_command", map[string]any{"session_id": sess, "command": "find . | sort | tr '\\n' ' '"})
		if r.Status != "ok" || strings.TrimSpace(r.Stdout) != ". ./made.txt ./notes.txt ./sub ./sub/seq.txt" {
			t.Errorf("%s after the restart: find . = %q (%+v)", sess, r.Stdout, r)
		}
	}
	if r := c.run(ctx, "execute_code", map[string]any{"language": "sh", "source": "echo alive"}); r.Status != "ok" || r.Stdout != "alive\n" {
		t.Errorf("a one-shot run after the restart: %+v", r)
	}
}

// TestReliabilityConcurrentStarts: runs started together all start. 20
// rounds of 10 calls at once, with 10 slots, each `echo i`: every call is
// served with its own output, none fails inside the runtime. (It catches
// the parent-death signal on libcontainer's first init process, which the
// Go runtime fires when it ends a thread of another start: see
// RELIABILITY.md, "Known bugs".)
func TestReliabilityConcurrentStarts(t *testing.T) {
	const rounds, width = 20, 10
	ctx := ctxFor(t, 5*time.Minute)
	cmd := sandcellCommandWith(t, []string{"--sessions-dir", sessionsDir(t), "--max-runs", strconv.Itoa(width), "--max-queue", "0"})
	c := connect(t, ctx, cmd, nil, "2025-11-25")
	defer c.cs.Close()
	failed := 0
	var lat latencies
	for r := range rounds {
		for i, call := range burst(ctx, width, func(int) *mcp.ClientSession { return c.cs }, false) {
			if !call.last.ok {
				failed++
				t.Errorf("round %d, call %d: %s%s", r, i, call.last.err, busyText(call.last))
				continue
			}
			lat = append(lat, call.last.took)
		}
	}
	t.Logf("%d runs, %d at a time: %d failed; latency %s", rounds*width, width, failed, lat.summary())
}

// TestReliabilityLoad: 200 concurrent execute_code calls over Streamable
// HTTP, from one shared client session and from 200 client sessions. With
// the default gate (runs = CPUs, queue = 4 x CPUs) every call is either
// served or refused as busy with a delay, none lost; clients that retry
// after the delay get all 200 served. With --max-queue 200 all are served
// without a refusal, except that one session may have at most 64 calls in
// flight (mcp.Options.MaxInFlight): the shared session's calls past that
// are refused at once. The server's RSS stays bounded, and its descriptors
// come back to where they were once the clients are gone.
func TestReliabilityLoad(t *testing.T) {
	const n = 200
	type scenario struct {
		mode  string // "shared" or "per-call"
		retry bool
	}
	for _, gate := range []struct {
		name      string
		flags     []string
		scenarios []scenario
	}{
		{"default-gate", nil, []scenario{{"shared", false}, {"per-call", false}, {"per-call", true}}},
		{"max-queue-200", []string{"--max-queue", "200"}, []scenario{{"shared", false}, {"per-call", false}}},
	} {
		t.Run(gate.name, func(t *testing.T) {
			ctx := ctxFor(t, 10*time.Minute)
			addr := freeAddr(t)
			cmd := sandcellCommandWith(t, append([]string{"--sessions-dir", sessionsDir(t)}, gate.flags...), "--http", addr)
			startServer(t, cmd, addr)
			pid := cmd.Process.Pid
			mem := watchRSS(pid)
			fd0 := fdCount(pid)
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * n}}
			for _, sc := range gate.scenarios {
				name := sc.mode + map[bool]string{false: "", true: "-retry"}[sc.retry]
				t.Run(name, func(t *testing.T) {
					sessions, closeAll := loadSessions(t, ctx, addr, hc, sc.mode, n)
					defer closeAll()
					start := time.Now()
					calls := burst(ctx, n, func(i int) *mcp.ClientSession { return sessions[i%len(sessions)] }, sc.retry)
					total := time.Since(start)
					var ok, busy, busyCalls, capped, lost int
					var lat, runLat latencies
					var delays []int
					for i, c := range calls {
						busy += c.busies
						if c.busies > 0 {
							busyCalls++
						}
						delays = append(delays, c.delays...)
						switch {
						case c.last.ok:
							ok++
							lat = append(lat, c.total)
							runLat = append(runLat, c.last.took)
						case c.last.capped && sc.mode == "shared" && gate.flags != nil:
							capped++
						case c.last.err != "":
							lost++
							t.Errorf("call %d: %s", i, c.last.err)
						case c.last.busy > 0 && sc.retry:
							lost++
							t.Errorf("call %d: still busy after %d attempts", i, c.attempts)
						}
					}
					t.Logf("%s %s: %d calls in %v: %d ok, %d busy replies (%d calls refused at least once; delays asked %s ms), %d refused past the session's in-flight cap, %d lost",
						gate.name, name, n, total.Round(time.Millisecond), ok, busy, busyCalls, intRange(delays), capped, lost)
					if len(lat) > 0 {
						t.Logf("%s %s: latency of a served call, first attempt to result: %s; its last attempt: %s", gate.name, name, lat.summary(), runLat.summary())
					}
					switch {
					case lost > 0:
					case sc.retry && ok != n:
						t.Errorf("with retries %d of %d calls served", ok, n)
					case !sc.retry && gate.flags == nil && (ok+busy != n || busy == 0 || ok == 0):
						t.Errorf("default gate, no retry: %d ok + %d busy, want %d with some of each", ok, busy, n)
					case gate.flags != nil && sc.mode == "shared" && (ok+capped+busyCalls != n || ok < min(n, 64)):
						// One session holds at most 64 calls in flight; past
						// that a call gets the busy result (mcp.BusyError).
						t.Errorf("--max-queue 200, one session: %d ok, %d refused as busy, %d past the in-flight cap; want %d answered, at least 64 served", ok, busyCalls, capped, n)
					case gate.flags != nil && sc.mode != "shared" && (ok+capped != n || busy != 0):
						t.Errorf("--max-queue 200: %d ok, %d busy, %d past the in-flight cap; want all %d served", ok, busy, capped, n)
					}
				})
			}
			if gate.flags == nil { // Piston's and Judge0's routes, through the same gate
				restLoad(t, addr, hc, n)
			}
			// The clients are gone: the server's connections close.
			hc.CloseIdleConnections()
			var fdEnd int
			eventually(5*time.Second, func() error {
				if fdEnd = fdCount(pid); fdEnd > fd0+4 {
					return errors.New("connections still open")
				}
				return nil
			})
			after, peak, hwm := mem.stop()
			t.Logf("%s: server RSS before %s, peak %s sampled (VmHWM %s), after %s; fds %d before, %d after",
				gate.name, mib(mem.first), mib(peak), mib(hwm), mib(after), fd0, fdEnd)
			if max(peak, hwm) > 500<<10 {
				t.Errorf("server RSS peaked at %s, want < 500 MiB", mib(max(peak, hwm)))
			}
			if fdEnd > fd0+4 {
				t.Errorf("server fds: %d before, %d after the clients closed their connections", fd0, fdEnd)
			}
		})
	}
}

// TestReliabilitySequential: 1,000 runs one after another through one
// client session over HTTP. None is lost; the last 100 are not much slower
// than the first 100; the server's descriptors do not grow. It takes about
// two minutes (a run is 40-100 ms here).
func TestReliabilitySequential(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 real runs (not in -short)")
	}
	const n = 1000
	ctx := ctxFor(t, 20*time.Minute)
	addr := freeAddr(t)
	cmd := sandcellCommand(t, "--http", addr)
	startServer(t, cmd, addr)
	pid := cmd.Process.Pid
	state, parent := flagValue(cmd, "--state-dir"), cgroupParentOf(cmd)
	mem := watchRSS(pid)
	cs, err := httpSession(ctx, addr, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	t.Logf("protocol %s", cs.InitializeResult().ProtocolVersion)
	fd0, rss0 := fdCount(pid), mem.now()
	var lat latencies
	var fd100 int
	start := time.Now()
	for i := range n {
		o := echoCall(ctx, cs, i)
		if !o.ok {
			t.Fatalf("run %d: lost: %s", i, o.err+busyText(o))
		}
		lat = append(lat, o.took)
		if i == 99 {
			fd100 = fdCount(pid)
		}
	}
	total := time.Since(start)
	fdEnd := fdCount(pid)
	after, peak, hwm := mem.stop()
	first, last := lat[:100].median(), lat[n-100:].median()
	t.Logf("%d runs in %v: %s", n, total.Round(time.Millisecond), lat.summary())
	slowest := make([]int, n)
	for i := range slowest {
		slowest[i] = i
	}
	slices.SortFunc(slowest, func(a, b int) int { return int(lat[b] - lat[a]) })
	for _, i := range slowest[:5] {
		t.Logf("slow: run %d took %v", i, lat[i].Round(time.Millisecond))
	}
	t.Logf("median of the first 100 %v, of the last 100 %v: last/first %.2f", first, last, float64(last)/float64(first))
	t.Logf("server fds: %d before the first run, %d after 100 runs, %d after %d", fd0, fd100, fdEnd, n)
	t.Logf("server RSS: %s before, %s after, peak %s sampled (VmHWM %s)", mib(rss0), mib(after), mib(peak), mib(hwm))
	if float64(last) > 3*float64(first) {
		t.Errorf("the last 100 runs' median %v is over 3x the first 100's %v", last, first)
	}
	if fdEnd > fd100+4 || fdEnd > fd0+8 {
		t.Errorf("server fds grew: %d before, %d after 100 runs, %d after %d", fd0, fd100, fdEnd, n)
	}
	if max(peak, hwm) > 500<<10 {
		t.Errorf("server RSS peaked at %s, want < 500 MiB", mib(max(peak, hwm)))
	}
	// Nothing of 1,000 runs is left on the host.
	if err := eventually(5*time.Second, func() error {
		if cg, m := cgroupChildren(parent), mountsBelow(t, state); len(cg)+len(m) > 0 {
			return fmt.Errorf("cgroups %v, mounts %v", cg, m)
		}
		return nil
	}); err != nil {
		t.Errorf("after %d runs: %v", n, err)
	}
}

// --- calls under load ---

// httpSession connects a Go SDK client over Streamable HTTP. version ""
// is the SDK's default (it probes the stateless 2026-07-28 era first).
func httpSession(ctx context.Context, addr string, hc *http.Client, version string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "sandcell-reliability", Version: "1"}, nil)
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc}, so)
}

// loadSessions connects the client sessions of a load mode: "shared" is
// one session in the handshake era (2025-11-25) that every call uses;
// "per-call" is n sessions, connected concurrently, in the SDK's default
// era.
func loadSessions(t *testing.T, ctx context.Context, addr string, hc *http.Client, mode string, n int) ([]*mcp.ClientSession, func()) {
	t.Helper()
	if mode == "shared" {
		cs, err := httpSession(ctx, addr, hc, "2025-11-25")
		if err != nil {
			t.Fatal(err)
		}
		return []*mcp.ClientSession{cs}, func() { cs.Close() }
	}
	sessions := make([]*mcp.ClientSession, n)
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { sessions[i], errs[i] = httpSession(ctx, addr, hc, "") })
	}
	wg.Wait()
	closeAll := func() {
		for _, cs := range sessions {
			if cs != nil {
				cs.Close()
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		closeAll()
		t.Fatalf("connecting %d client sessions: %v", n, err)
	}
	t.Logf("%d client sessions connected at once in %v (protocol %s)", n, time.Since(start).Round(time.Millisecond), sessions[0].InitializeResult().ProtocolVersion)
	return sessions, closeAll
}

// outcome is one execute_code call's answer: served with the right stdout,
// refused as busy (with the delay asked), or lost (err says how).
type outcome struct {
	ok     bool
	busy   time.Duration
	capped bool // refused past the session's in-flight cap (a protocol error)
	err    string
	took   time.Duration
}

var busyRE = regexp.MustCompile(`^busy, retry after (\d+) ms`)

// echoCall runs `echo i` in sh and checks the answer.
func echoCall(ctx context.Context, cs *mcp.ClientSession, i int) outcome {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute) // a hang is a loss
	defer cancel()
	start := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"language": "sh", "source": fmt.Sprintf("echo %d", i)}})
	o := outcome{took: time.Since(start)}
	switch {
	case err != nil:
		o.err = "protocol error: " + err.Error()
		o.capped = strings.Contains(err.Error(), "too many requests in flight in this session")
	case res.IsError:
		if m := busyRE.FindStringSubmatch(text(res)); m != nil {
			ms, _ := strconv.Atoi(m[1])
			o.busy = time.Duration(max(ms, 1)) * time.Millisecond
		} else {
			o.err = "isError: " + text(res)
		}
	default:
		var r runResult
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &r); err != nil || r.Status != "ok" || r.Stdout != fmt.Sprintf("%d\n", i) {
			o.err = fmt.Sprintf("wrong result %s", b)
		} else {
			o.ok = true
		}
	}
	return o
}

func busyText(o outcome) string {
	if o.busy > 0 {
		return fmt.Sprintf("busy, retry after %v", o.busy)
	}
	return ""
}

// callStats is one call of a burst, with its retries.
type callStats struct {
	last     outcome
	attempts int
	busies   int
	delays   []int // ms asked by each busy reply
	total    time.Duration
}

// burst makes n concurrent calls, released together, call i through
// session(i). With retry, a call refused as busy is made again after the
// delay the server asked for (at most 1,000 times).
func burst(ctx context.Context, n int, session func(i int) *mcp.ClientSession, retry bool) []callStats {
	out := make([]callStats, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-gate
			start := time.Now()
			s := &out[i]
			for s.attempts < 1000 {
				s.attempts++
				s.last = echoCall(ctx, session(i), i)
				if s.last.busy == 0 {
					break
				}
				s.busies++
				s.delays = append(s.delays, int(s.last.busy.Milliseconds()))
				if !retry {
					break
				}
				time.Sleep(s.last.busy)
			}
			s.total = time.Since(start)
		})
	}
	close(gate)
	wg.Wait()
	return out
}

// --- the host, as seen from /proc and /sys ---

// procInfo is a process in the sandbox uid range.
type procInfo struct {
	pid, ppid   int
	uid         int
	name, state string
	cgroup      string // its memory cgroup (v1) or its cgroup (v2)
}

func (p procInfo) String() string {
	return fmt.Sprintf("pid %d (parent %d) uid %d %s (%s) in %s", p.pid, p.ppid, p.uid, p.name, p.state, p.cgroup)
}

// sandboxProcs lists every process on the host whose real or effective
// uid is in the sandbox range, zombies included.
func sandboxProcs() []procInfo {
	paths, _ := filepath.Glob("/proc/[0-9]*/status")
	var out []procInfo
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		var p procInfo
		p.pid, _ = strconv.Atoi(filepath.Base(filepath.Dir(path)))
		in := false
		for line := range strings.Lines(string(b)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			f := strings.Fields(v)
			switch {
			case k == "Name" && len(f) > 0:
				p.name = f[0]
			case k == "State" && len(f) > 0:
				p.state = f[0]
			case k == "PPid" && len(f) > 0:
				p.ppid, _ = strconv.Atoi(f[0])
			case k == "Uid" && len(f) >= 2:
				for _, s := range f[:2] {
					if u, err := strconv.Atoi(s); err == nil && u >= sandboxUIDFirst && u <= sandboxUIDLast {
						in, p.uid = true, u
					}
				}
			}
		}
		if in {
			p.cgroup = procCgroup(p.pid)
			out = append(out, p)
		}
	}
	return out
}

// procCgroup is pid's memory cgroup (cgroup v1) or unified cgroup.
func procCgroup(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	unified := ""
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "memory" {
			return f[2]
		}
		if f[0] == "0" {
			unified = f[2]
		}
	}
	return unified
}

// ours keeps the processes in a child of the cgroup parent.
func ours(ps []procInfo, parent string) []procInfo {
	var out []procInfo
	for _, p := range ps {
		if strings.HasPrefix(p.cgroup, "/"+parent+"/") {
			out = append(out, p)
		}
	}
	return out
}

// parents summarises whose children ps are: the server's, pid 1's (the
// host's init, which adopts orphans), or other sandbox processes'.
func parents(ps []procInfo, server int) string {
	var srv, init, other int
	for _, p := range ps {
		switch p.ppid {
		case server:
			srv++
		case 1:
			init++
		default:
			other++
		}
	}
	return fmt.Sprintf("%d of the server, %d of pid 1, %d of others", srv, init, other)
}

func countSleeps(ps []procInfo) int {
	n := 0
	for _, p := range ps {
		if p.name == "sleep" && p.state != "Z" {
			n++
		}
	}
	return n
}

// procState is the one-letter state of pid.
func procState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3], nil
	}
	return "", fmt.Errorf("odd /proc/%d/stat", pid)
}

// cgroupChildren lists the sub-cgroups of the parent in every hierarchy,
// as "hierarchy/child".
func cgroupChildren(parent string) []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent)
	if len(dirs) == 0 {
		dirs, _ = filepath.Glob("/sys/fs/cgroup/" + parent) // cgroup v2 alone
	}
	var out []string
	for _, d := range dirs {
		for _, c := range children(d) {
			out = append(out, filepath.Base(filepath.Dir(d))+"/"+c)
		}
	}
	return out
}

// mountsBelow lists the mount points strictly below dir in this process's
// mount table, but for the state tmpfs of a live server instance (a mount
// on dir/<instance> whose lock a running server holds): where the state
// dir is not on a tmpfs, each instance mounts one of its own (issue #18),
// and it goes with the instance. A dead instance's is listed.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unescape := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			if p := unescape.Replace(fields[4]); strings.HasPrefix(p, prefix) && !liveInstanceFS(dir, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// liveInstanceFS says whether mountpoint is the state tmpfs of a live
// instance of state dir dir: one level below it, with its lock held.
func liveInstanceFS(dir, mountpoint string) bool {
	if filepath.Dir(mountpoint) != filepath.Clean(dir) {
		return false
	}
	f, err := os.Open(filepath.Join(mountpoint, "lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
}

// stateEntries lists the state dir: one directory per server instance.
func stateEntries(state string) ([]string, error) {
	entries, err := os.ReadDir(state)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, err
}

// fdCount is the number of pid's open descriptors.
func fdCount(pid int) int {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(entries)
}

// memKB reads pid's VmRSS and VmHWM (peak RSS), in KiB.
func memKB(pid int) (rss, hwm int64) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm
}

// rssWatch samples a process's VmRSS every 20 ms.
type rssWatch struct {
	pid   int
	first int64
	mu    sync.Mutex
	peak  int64
	quit  chan struct{}
	done  chan struct{}
}

func watchRSS(pid int) *rssWatch {
	w := &rssWatch{pid: pid, quit: make(chan struct{}), done: make(chan struct{})}
	w.first, _ = memKB(pid)
	w.peak = w.first
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-tick.C:
				rss, _ := memKB(pid)
				w.mu.Lock()
				w.peak = max(w.peak, rss)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *rssWatch) now() int64 {
	rss, _ := memKB(w.pid)
	return rss
}

// stop ends the sampling: the RSS now, the largest sample and the kernel's
// high-water mark, in KiB.
func (w *rssWatch) stop() (now, peak, hwm int64) {
	close(w.quit)
	<-w.done
	now, hwm = memKB(w.pid)
	return now, max(w.peak, now), hwm
}

func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// --- small helpers ---

// eventually polls check every 50 ms until it returns nil or d has passed;
// it returns check's last error.
func eventually(d time.Duration, check func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dumpGoroutines makes a stuck server print its goroutines into the test
// log (SIGQUIT: the Go runtime dumps every goroutine and exits).
func dumpGoroutines(t *testing.T, pid int) {
	t.Helper()
	t.Logf("server %d is stuck: its goroutines follow", pid)
	syscall.Kill(pid, syscall.SIGQUIT)
	time.Sleep(2 * time.Second)
}

// flagValue is the value of a flag on a command line.
func flagValue(cmd *exec.Cmd, name string) string {
	for i, a := range cmd.Args {
		if a == name && i+1 < len(cmd.Args) {
			return cmd.Args[i+1]
		}
	}
	return ""
}

// sameServer is a new command with cmd's binary and arguments: the same
// state dir, sessions dir and cgroup parent.
func sameServer(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	c := exec.Command(cmd.Path, cmd.Args[1:]...)
	c.Stderr = &testLogWriter{t: t, prefix: "sandcell (restarted): "}
	c.WaitDelay = serverWaitDelay
	return c
}

func trunc(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// latencies are call times.
type latencies []time.Duration

// pct is the p-th percentile (nearest rank).
func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func (l latencies) median() time.Duration { return l.pct(50) }

func (l latencies) summary() string {
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("n=%d p50 %v, p90 %v, p99 %v, max %v", len(l), r(l.pct(50)), r(l.pct(90)), r(l.pct(99)), r(l.pct(100)))
}

// intRange is "min-max" of xs, or "-".
func intRange(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d-%d", slices.Min(xs), slices.Max(xs))
}
