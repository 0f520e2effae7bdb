package backend

import "time"

// phaseHook, if set, is told when each phase of a run ends: where the
// time of a run goes (BenchmarkBreakdown sets it through export_test.go;
// nil in a server, where a phase end costs one nil check).
var phaseHook func(id, phase string, at time.Time)

// phase reports the end of a run's phase to phaseHook.
func phase(id, name string) {
	if h := phaseHook; h != nil {
		h(id, name, time.Now())
	}
}
