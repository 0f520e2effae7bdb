package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

// TestLiveAPIFigures measures live sandboxes through a real server's HTTP
// API (issue #39's goals, BENCHMARKS.md "Live sandboxes through the API"):
// create to the first command (`true`) done, a command in a running
// sandbox, resume of a paused one (each p50 over SANDCELL_LIVE_BENCH_N
// rounds, default 20), and SANDCELL_LIVE_IDLE idle sandboxes at once
// (default 20): their creation rate and the host memory each costs (the
// server's RSS growth, the cgroup parent's memory and the kernel's slab
// growth). Every call must succeed; the figures are logged.
func TestLiveAPIFigures(t *testing.T) {
	n, idle := envInt("SANDCELL_LIVE_BENCH_N", 20), envInt("SANDCELL_LIVE_IDLE", 20)
	s := startLiveServer(t)
	p50 := func(ds []time.Duration) string {
		slices.Sort(ds)
		return fmt.Sprintf("p50 %.2f ms, p90 %.2f ms", float64(ds[len(ds)/2].Microseconds())/1000, float64(ds[len(ds)*9/10].Microseconds())/1000)
	}
	trueCmd := api.ProcessSpec{Argv: []string{"true"}}
	var create, cmd, resume []time.Duration
	for range n {
		t0 := time.Now()
		info := s.create(api.SandboxSpec{Template: "python"})
		s.must(http.StatusOK, "POST", "/"+info.ID+"/processes?wait=true", trueCmd, nil)
		create = append(create, time.Since(t0))
		s.must(http.StatusNoContent, "DELETE", "/"+info.ID, nil, nil)
	}
	info := s.create(api.SandboxSpec{Template: "python"})
	for range n {
		t0 := time.Now()
		s.must(http.StatusOK, "POST", "/"+info.ID+"/processes?wait=true", trueCmd, nil)
		cmd = append(cmd, time.Since(t0))
	}
	s.must(http.StatusCreated, "POST", "/"+info.ID+"/processes", api.ProcessSpec{Argv: []string{"sleep", "1000"}}, nil)
	for range n {
		s.must(http.StatusOK, "POST", "/"+info.ID+"/pause", nil, nil)
		t0 := time.Now()
		s.must(http.StatusOK, "POST", "/"+info.ID+"/resume", nil, nil)
		resume = append(resume, time.Since(t0))
	}
	s.must(http.StatusNoContent, "DELETE", "/"+info.ID, nil, nil)
	t.Logf("through the HTTP API, %d rounds: create to `true` done %s; `true` in a running sandbox %s; resume %s",
		n, p50(create), p50(cmd), p50(resume))

	runtime.GC()
	time.Sleep(time.Second)
	rss0, cg0, slab0 := procKiBOf(t, fmt.Sprintf("/proc/%d/status", s.pid), "VmRSS:"), cgroupMemory(t, s.h.parent), procKiBOf(t, "/proc/meminfo", "Slab:")
	var ids []string
	t0 := time.Now()
	for range idle {
		ids = append(ids, s.create(api.SandboxSpec{Template: "python", LifetimeMS: 3_600_000, DiskMB: 16}).ID)
	}
	created := time.Since(t0)
	time.Sleep(2 * time.Second)
	rss1, cg1, slab1 := procKiBOf(t, fmt.Sprintf("/proc/%d/status", s.pid), "VmRSS:"), cgroupMemory(t, s.h.parent), procKiBOf(t, "/proc/meminfo", "Slab:")
	per := func(a, b int64) float64 { return float64(b-a) / float64(idle) }
	t.Logf("%d idle sandboxes (python, 16 MiB disk): %.1f creates/s; per sandbox: server RSS %.0f KiB, cgroup memory %.0f KiB, slab %.0f KiB, total %.0f KiB",
		idle, float64(idle)/created.Seconds(), per(rss0, rss1), per(cg0, cg1)/1024, per(slab0, slab1), per(rss0, rss1)+per(cg0, cg1)/1024+per(slab0, slab1))
	for _, id := range ids {
		s.must(http.StatusNoContent, "DELETE", "/"+id, nil, nil)
	}
	s.nothingLeft()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// procKiBOf is the "key: N kB" line of file, in KiB.
func procKiBOf(t *testing.T, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	t.Fatalf("no %s in %s", key, file)
	return 0
}

// cgroupMemory is the memory charged to cgroup parent and below, in bytes
// (v1's memory.usage_in_bytes, v2's memory.current).
func cgroupMemory(t *testing.T, parent string) int64 {
	t.Helper()
	for _, f := range []string{filepath.Join("/sys/fs/cgroup/memory", parent, "memory.usage_in_bytes"), filepath.Join("/sys/fs/cgroup", parent, "memory.current")} {
		if b, err := os.ReadFile(f); err == nil {
			v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return v
		}
	}
	t.Fatalf("no memory figure of cgroup %s", parent)
	return 0
}
