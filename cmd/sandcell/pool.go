package main

import (
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// poolInterpreters are the languages whose interpreter a warm pool may
// start ahead of the program (oci.PoolConfig.Scripts). Only python: its
// start-up reads nothing of /work but its script (checked by
// oci.TestPoolIdentity). node reads /work/package.json before its main
// script, which a pre-started node would have read before the request's
// files were there.
var poolInterpreters = []string{"python"}

// openPool puts a warm pool in front of the libcontainer runtime
// (Config.PoolSize 0: none).
func (a *app) openPool() {
	if a.cfg.PoolSize <= 0 {
		return
	}
	var scripts [][]string
	for _, name := range poolInterpreters {
		if l, err := rootfs.Lookup(name); err == nil && len(l.Compile) == 0 {
			scripts = append(scripts, l.Run)
		}
	}
	a.pool = oci.NewPool(a.rt, oci.PoolConfig{
		Size:    a.cfg.PoolSize,
		Idle:    a.cfg.PoolIdle,
		Scripts: scripts,
		Busy:    a.poolBusy,
		Logger:  a.log,
	})
}

// poolBusy says that runs wait for a slot of the server's gate: the pool
// then prepares nothing ahead of them.
func (a *app) poolBusy() bool {
	g := a.gate.Load()
	return g != nil && g.queued() > 0
}

// queued is the number of runs waiting for a slot.
func (g *gate) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}
