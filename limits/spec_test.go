package limits

import (
	"reflect"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestResources(t *testing.T) {
	tests := []struct {
		cpus      float64
		wantQuota int64
	}{
		{1, 100000},
		{0.5, 50000},
		{0.01, 1000},
		{2.25, 225000},
	}
	for _, tt := range tests {
		s := Defaults()
		s.CPUs = tt.cpus
		r := s.Resources()
		if r.Memory == nil || r.Memory.Limit == nil || *r.Memory.Limit != s.MemoryBytes {
			t.Fatalf("Resources().Memory = %+v, want Limit %d", r.Memory, s.MemoryBytes)
		}
		if r.Memory.Swap == nil || *r.Memory.Swap != s.MemoryBytes {
			t.Errorf("Resources().Memory.Swap = %v, want %d (memory+swap equal to memory: no swap)", r.Memory.Swap, s.MemoryBytes)
		}
		if r.Memory.Swappiness != nil || r.Memory.DisableOOMKiller != nil {
			t.Errorf("Resources().Memory swappiness %v, disable OOM killer %v; want both nil", r.Memory.Swappiness, r.Memory.DisableOOMKiller)
		}
		if r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit != s.Pids {
			t.Errorf("Resources().Pids = %+v, want Limit %d", r.Pids, s.Pids)
		}
		if r.CPU == nil || r.CPU.Quota == nil || r.CPU.Period == nil {
			t.Fatalf("Resources().CPU = %+v, want quota and period", r.CPU)
		}
		if *r.CPU.Quota != tt.wantQuota || *r.CPU.Period != 100000 {
			t.Errorf("CPUs %g: quota/period = %d/%d, want %d/100000", tt.cpus, *r.CPU.Quota, *r.CPU.Period, tt.wantQuota)
		}
	}
}

func TestRlimits(t *testing.T) {
	tests := []struct {
		cpuTime time.Duration
		wantCPU uint64
	}{
		{10 * time.Second, 10},
		{1500 * time.Millisecond, 2},
		{time.Millisecond, 1},
	}
	for _, tt := range tests {
		s := Defaults()
		s.CPUTime = tt.cpuTime
		got := s.Rlimits()
		want := []specs.POSIXRlimit{
			{Type: "RLIMIT_CPU", Soft: tt.wantCPU, Hard: tt.wantCPU + 1},
			{Type: "RLIMIT_FSIZE", Soft: 64 << 20, Hard: 64 << 20},
			{Type: "RLIMIT_NOFILE", Soft: 256, Hard: 256},
			{Type: "RLIMIT_CORE", Soft: 0, Hard: 0},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("CPUTime %v: Rlimits() = %+v, want %+v", tt.cpuTime, got, want)
		}
	}
}
