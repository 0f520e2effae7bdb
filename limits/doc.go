// Package limits decides how much a sandboxed run may use and holds every run inside one parent
// cgroup that bounds them all.
//
// Invariant: a Set returned by Resolve never exceeds the administrator's ceilings and passes
// Validate, so a request can tighten its limits or ask for more up to a ceiling, never beyond it.
// The cgroup side writes into, kills processes of, and removes only cgroups beneath the parent
// named in ParentConfig (or found by OpenDelegated); it never touches a cgroup outside that
// subtree. Delegate writes only the cgroup named in DelegateConfig and creates the one below it
// that the user owns.
//
// The package has two halves:
//
//   - Pure values: Set, Defaults, Ceilings, Resolve, and the conversions Set.Resources and
//     Set.Rlimits into runtime-spec values for the oci package. ParseSize and FormatSize serve
//     the CLI and the notes Resolve returns.
//   - The cgroup parent (Linux only): DetectMode, EnsureParent, Parent.ChildPath,
//     Parent.RemoveStale, Parent.RemoveChild and ReadUsage. Libcontainer creates one child cgroup
//     per run at Parent.ChildPath(id); this package only manages the parent and cleans up what
//     libcontainer leaves behind, so no cgroup ever has two managers.
//   - Delegation for rootless servers (Linux only, tier 2): Delegate and Undelegate, run by root
//     (`sandcell setup --user NAME`), give a user a cgroup subtree under ceilings it cannot
//     change; OpenDelegated, run by that user's server, returns a Parent inside it, and
//     DetectDelegation tells `sandcell doctor` which tier the server would get. A delegated
//     Parent never writes the limits of the cgroup it was given, only of the runs below it.
//
// Typical use by the executor:
//
//	set, notes, err := limits.Resolve(cfg.Defaults, cfg.Ceilings, request)
//	if err != nil { /* bad arguments: errors.Is(err, limits.ErrInvalid) */ }
//	spec.Linux.Resources = set.Resources()
//	spec.Linux.CgroupsPath = parent.ChildPath(id)
//	process.Rlimits = set.Rlimits()
//	// ... run; then, before destroying the container:
//	usage, err := limits.ReadUsage(mode, container.State().CgroupPaths)
//	oom := usage.OOMKills > 0 // never decide OOM from the exit code
package limits
