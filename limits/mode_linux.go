package limits

import cgroups "github.com/containerd/cgroups/v3"

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
