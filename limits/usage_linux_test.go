package limits

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestReadUsage(t *testing.T) {
	v2Full := map[string]string{
		"memory.events": "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n",
		"memory.peak":   "12345678\n",
		"cpu.stat":      "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n",
		"pids.events":   "max 3\n",
	}
	v1Memory := map[string]string{
		"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
		"memory.max_usage_in_bytes": "8765432\n",
	}
	without := func(m map[string]string, key string, repl ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			if k != key {
				out[k] = v
			}
		}
		if len(repl) == 1 {
			out[key] = repl[0]
		}
		return out
	}
	tests := []struct {
		name  string
		mode  Mode
		files map[string]map[string]string // controller key -> files; "" on v2
		drop  string                       // controller key left out of the paths map, if not ""
		want  Usage
	}{
		{
			name:  "v2",
			mode:  Unified,
			files: map[string]map[string]string{"": v2Full},
			want:  Usage{OOMKills: 2, MemoryPeakBytes: 12345678, CPUTime: 1500 * time.Millisecond, PidsMaxHits: 3},
		},
		{
			name:  "v2 before Linux 5.19 has no memory.peak",
			mode:  Unified,
			files: map[string]map[string]string{"": without(v2Full, "memory.peak")},
			want:  Usage{OOMKills: 2, CPUTime: 1500 * time.Millisecond, PidsMaxHits: 3, Missing: []string{"memory.peak"}},
		},
		{
			name:  "v2 memory.events without oom_kill",
			mode:  Unified,
			files: map[string]map[string]string{"": without(v2Full, "memory.events", "low 0\nhigh 0\nmax 0\noom 1\n")},
			want:  Usage{MemoryPeakBytes: 12345678, CPUTime: 1500 * time.Millisecond, PidsMaxHits: 3, Missing: []string{"memory.events oom_kill"}},
		},
		{
			name:  "v2 without memory and pids controllers",
			mode:  Unified,
			files: map[string]map[string]string{"": {"cpu.stat": "usage_usec 10\n"}},
			want:  Usage{CPUTime: 10 * time.Microsecond, Missing: []string{"memory.events", "memory.peak", "pids.events"}},
		},
		{
			name: "v1",
			mode: Legacy,
			files: map[string]map[string]string{
				"memory":  v1Memory,
				"cpuacct": {"cpuacct.usage": "2000000000\n"},
				"pids":    {"pids.events": "max 5\n"},
			},
			want: Usage{OOMKills: 1, MemoryPeakBytes: 8765432, CPUTime: 2 * time.Second, PidsMaxHits: 5},
		},
		{
			name: "v1 before Linux 4.13 has no oom_kill",
			mode: Legacy,
			files: map[string]map[string]string{
				"memory":  without(v1Memory, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n"),
				"cpuacct": {"cpuacct.usage": "1\n"},
				"pids":    {"pids.events": "max 0\n"},
			},
			want: Usage{MemoryPeakBytes: 8765432, CPUTime: 1, Missing: []string{"memory.oom_control oom_kill"}},
		},
		{
			name: "hybrid reads v1 controllers, not the unified path",
			mode: Hybrid,
			files: map[string]map[string]string{
				"memory":  v1Memory,
				"cpuacct": {"cpuacct.usage": "3\n"},
				"pids":    {"pids.events": "max 0\n"},
				"":        v2Full,
			},
			want: Usage{OOMKills: 1, MemoryPeakBytes: 8765432, CPUTime: 3},
		},
		{
			name: "v1 without cpuacct path",
			mode: Legacy,
			files: map[string]map[string]string{
				"memory":  v1Memory,
				"cpuacct": {"cpuacct.usage": "3\n"},
				"pids":    {"pids.events": "max 0\n"},
			},
			drop: "cpuacct",
			want: Usage{OOMKills: 1, MemoryPeakBytes: 8765432, Missing: []string{"cpuacct"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			paths := map[string]string{}
			for key, files := range tt.files {
				dir := filepath.Join(root, key, "sandcell", "run")
				writeFiles(t, dir, files)
				if tt.drop == "" || key != tt.drop {
					paths[key] = dir
				}
			}
			got, err := ReadUsage(tt.mode, paths)
			if err != nil {
				t.Fatalf("ReadUsage(%s, %v) error = %v", tt.mode, paths, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ReadUsage(%s) = %+v, want %+v", tt.mode, got, tt.want)
			}
		})
	}
}

func TestReadUsageErrors(t *testing.T) {
	root := t.TempDir()
	bad := filepath.Join(root, "bad")
	writeFiles(t, bad, map[string]string{"memory.events": "oom_kill 1\n", "memory.peak": "not a number\n"})
	tests := []struct {
		name  string
		mode  Mode
		paths map[string]string
		want  error
	}{
		{"destroyed v2 cgroup", Unified, map[string]string{"": filepath.Join(root, "gone")}, ErrNoCgroup},
		{"destroyed v1 cgroup", Legacy, map[string]string{"memory": filepath.Join(root, "gone")}, ErrNoCgroup},
		{"no v2 path", Unified, map[string]string{"memory": root}, ErrNoCgroup},
		{"no v1 paths", Legacy, map[string]string{"": root, "name=systemd": root}, ErrNoCgroup},
		{"nil paths", Hybrid, nil, ErrNoCgroup},
		{"unavailable", Unavailable, map[string]string{"": root}, ErrNoCgroup},
		{"unset mode", 0, map[string]string{"": root}, ErrNoCgroup},
		{"malformed counter", Unified, map[string]string{"": bad}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadUsage(tt.mode, tt.paths)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("ReadUsage(%s, %v) error = %v, want %v", tt.mode, tt.paths, err, tt.want)
			}
		})
	}
}
