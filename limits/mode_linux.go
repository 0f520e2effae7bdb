package limits

import (
	"fmt"
	"os"

	cgroups "github.com/containerd/cgroups/v3"
)

// DetectMode reports the cgroup layout mounted at /sys/fs/cgroup (containerd's cgroups.Mode,
// computed once per process).
func DetectMode() Mode {
	switch cgroups.Mode() {
	case cgroups.Legacy:
		return Legacy
	case cgroups.Hybrid:
		return Hybrid
	case cgroups.Unified:
		return Unified
	}
	return Unavailable
}

// HostMemory is MemTotal from /proc/meminfo in bytes (1 GiB if unreadable).
func HostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil && kb > 0 {
			return kb * 1024
		}
	}
	return 1 << 30
}
