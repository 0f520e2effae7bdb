package executor

import (
	"fmt"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

// PhaseLimits decides the limits of one phase of a run. This is the one
// place where a run's limits are decided:
//
//  1. the server's defaults (Options.Defaults),
//  2. raised, field by field, by the language's adjustments for the phase
//     (rootfs.Language.Limits or CompileLimits: a JVM needs more threads),
//  3. replaced by each field the request gives (tighter or looser),
//  4. clamped to the server's ceilings (Options.Ceilings), each clamp a
//     note, and validated (limits.Resolve).
func (e *Executor) PhaseLimits(adj, req api.Limits) (limits.Set, []string, error) {
	raise, err := limits.FromRequest(adj)
	if err != nil {
		return limits.Set{}, nil, fmt.Errorf("the language's limits: %w", err)
	}
	want, err := limits.FromRequest(req)
	if err != nil {
		return limits.Set{}, nil, err
	}
	return limits.Resolve(e.opts.Defaults.Raise(raise), e.opts.Ceilings, want)
}
