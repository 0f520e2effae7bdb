package backend

import (
	"strings"

	"github.com/sandcell/sandcell/internal/owner"
)

// Instance names. An instance's name is the owning process's token
// (internal/owner: pid, start time, pid namespace) and a number unique
// within that process (owner.NewName): "4242.98765.4026531836.1". It
// names the instance's state directory, and its container ids
// ("<name>-<n>") name the runs' cgroups, which every instance on the host
// with the same cgroup parent sees, whatever its state directory (issue
// #17). So any instance can tell from a cgroup's name alone whether its
// owner still lives (owner.Token.Dead, against /proc), without a
// directory the two share. A wasm runtime's instance in the same state
// directory is named the same way (package wasm).

// newInstanceName names a new instance of this process.
func newInstanceName() (string, error) { return owner.NewName() }

// instanceOf is the instance part of a container id.
func instanceOf(id string) string {
	inst, _, _ := strings.Cut(id, "-")
	return inst
}

// instanceOwner reads the owner's token from an instance name; ok is false
// for a name not made by newInstanceName (an older sandcell's random
// names, or anything else).
func instanceOwner(name string) (owner.Token, bool) { return owner.NameOwner(name) }

// deadInstance reports whether instance name's owner provably no longer
// lives. An instance whose name carries no token is never judged dead this
// way (only its unlocked state directory can prove it).
func deadInstance(name string) bool { return owner.DeadName(name) }
