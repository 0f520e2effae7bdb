package backend

import "time"

// SetPhaseHook makes every run report the end of each of its phases to h
// (nil: none). Not safe while runs are in flight.
func SetPhaseHook(h func(id, phase string, at time.Time)) { phaseHook = h }

// ZygotePid is the pid of r's running fork server (0: none).
func ZygotePid(r *Libcontainer) int {
	if r.fork == nil {
		return 0
	}
	r.fork.mu.Lock()
	defer r.fork.mu.Unlock()
	return r.fork.pid
}
