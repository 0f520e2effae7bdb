// Package doctor checks what a host offers sandcell (cgroups, user
// namespaces, seccomp, overlayfs, runsc, mmdebstrap, the layers) and, for
// each missing piece, names the command that fixes it.
package doctor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rootfs"
)

// Check is one line of the doctor's report.
type Check struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"`
	Detail   string `json:"detail"`
	Fix      string `json:"fix,omitempty"` // the command that fixes it
}

// Checks examines the host for the configuration cfg.
func Checks(ctx context.Context, cfg *config.Config) []Check {
	var cs []Check
	mode := limits.DetectMode()
	uid, _, rootless := config.Rootless()
	tc := Check{Name: "tier", Required: true, OK: true, Detail: TierText(limits.TierRoot)}
	noUserNS := cfg.NoKernelSandbox != ""
	if noUserNS {
		tc.OK, tc.Required = false, false
		tc.Detail = "no kernel sandbox (user namespaces refused): only isolation wasm runs"
	} else if rootless {
		d := limits.DetectDelegation(limits.DelegatedConfig{UID: uid, User: limits.UserName(uid), Mode: mode})
		tc.Detail = TierText(d.Tier) + "; " + d.String()
		if d.Tier != limits.TierDelegated {
			// A warning: runs work, with fewer limits.
			tc.OK, tc.Required, tc.Fix = false, false, d.Fix
		}
	}
	cs = append(cs, tc)

	cg := Check{Name: "cgroups", Required: !rootless, OK: mode != limits.Unavailable, Detail: "mode " + mode.String()}
	switch mode {
	case limits.Unified:
		cg.Detail += " (cgroup v2)"
	case limits.Legacy, limits.Hybrid:
		cg.Detail += " (cgroup v1)"
	}
	if missing := missingControllers(mode); len(missing) > 0 {
		cg.OK = false
		cg.Detail += "; missing controllers: " + strings.Join(missing, ", ")
		cg.Fix = "enable the memory, pids and cpu controllers (kernel cmdline cgroup_enable=memory, or systemd Delegate=yes)"
	} else if cg.OK {
		cg.Detail += "; memory, pids, cpu present"
	}
	cs = append(cs, cg)

	cs = append(cs, usernsCheck(cfg, rootless), wasmCheck(cfg))

	ok, ver := backend.SeccompSupport()
	sc := Check{Name: "seccomp", Required: true, OK: ok && kernelHasSeccomp(), Detail: "libseccomp " + ver}
	if !ok {
		sc.Detail = "this binary was built without seccomp support"
		sc.Fix = "apt-get install libseccomp-dev && make build   (cgo with -tags seccomp)"
	}
	cs = append(cs, sc)

	fsys, _ := os.ReadFile("/proc/filesystems")
	cs = append(cs, Check{Name: "overlayfs", Required: false, OK: strings.Contains(string(fsys), "\toverlay\n"),
		Detail: "for shared read-only layers", Fix: "modprobe overlay"})

	runsc := Check{Name: "runsc", Required: cfg.Isolation == "gvisor", Detail: "gVisor isolation (--isolation gvisor)", Fix: "apt-get install runsc"}
	if info, err := backend.ProbeRunsc(cfg.RunscPath()); err == nil {
		platform, perr := info.ChoosePlatform(backend.RunscConfig{Platform: cfg.RunscPlatform, AllowKVM: cfg.RunscAllowKVM})
		runsc.OK = perr == nil
		runsc.Detail = fmt.Sprintf("%s, %s, platforms %s, using %s", info.Path, info.Version, strings.Join(info.Platforms, "/"), platform)
		if _, _, rootless := config.Rootless(); rootless {
			runsc.Detail += "; rootless: runsc --rootless in sandcell's user namespace, CPU time by sandcell's watchdog"
		}
		if perr != nil {
			runsc.Detail, runsc.Fix = perr.Error(), "choose --runsc-platform from: "+strings.Join(info.Platforms, ", ")
		}
	}
	cs = append(cs, runsc)

	mm := Check{Name: "mmdebstrap", Required: false, Detail: "builds language layers from Debian packages", Fix: "apt-get install mmdebstrap"}
	if p, err := exec.LookPath("mmdebstrap"); err == nil {
		mm.OK, mm.Detail = true, p
	}
	cs = append(cs, mm)

	if sc, ok := SlurmCheck(os.Getenv, readTrim("/proc/self/cgroup"), cfg.CgroupParent); ok {
		cs = append(cs, sc)
	}

	store := cfg.Store(nil)
	for _, l := range append(rootfs.Languages(), rootfs.WasmLayers()...) {
		c := Check{Name: "layer " + l.Name, Required: false, OK: true, Detail: "built in " + cfg.LayerDir}
		if built, err := store.Built(l); err != nil || !built {
			c.OK, c.Detail, c.Fix = false, "not built", "sandcell rootfs build "+l.Name
		}
		cs = append(cs, c)
	}
	return append(cs, imageCheck(store, cfg.LayerDir))
}

// imageCheck reports the imported images (run environments of --image).
func imageCheck(store *rootfs.Store, home string) Check {
	c := Check{Name: "image store", OK: true}
	imgs, err := store.Images()
	if err != nil {
		c.OK, c.Detail, c.Fix = false, err.Error(), "sandcell image rm NAME (or remove the damaged record from "+home+"/rootfs/images/refs)"
		return c
	}
	var bytes int64
	names := make([]string, len(imgs))
	for i, img := range imgs {
		names[i], bytes = img.Name, bytes+img.Bytes
	}
	c.Detail = fmt.Sprintf("%d images in %s/rootfs/images", len(imgs), home)
	if len(imgs) > 0 {
		c.Detail += fmt.Sprintf(" (%s; %.1f MB unpacked, shared layers counted per image)", strings.Join(names, ", "), float64(bytes)/1e6)
	} else {
		c.Detail += " (import one: sandcell image import PATH --name NAME)"
	}
	return c
}

// SlurmCheck is the note on a run inside a Slurm job (SLURM_JOB_ID set;
// getenv is os.Getenv, procCgroup the text of /proc/self/cgroup), and
// false outside one. slurmd puts a job's processes in cgroups of its own
// (proctrack/cgroup, task/cgroup: <hierarchy>:/slurm.../job_N/step_M),
// where its limits, accounting and scancel apply. sandcell does not nest
// its sandboxes there: each gets a cgroup under parent at the root of the
// hierarchies (on cgroup v2 a job's cgroup holds processes, so by the
// no-internal-processes rule it cannot also hold the sandboxes' limited
// children). So Slurm neither limits nor counts the sandboxes' memory and
// CPU, and reaches them only through sandcell.
func SlurmCheck(getenv func(string) string, procCgroup, parent string) (Check, bool) {
	job := getenv("SLURM_JOB_ID")
	if job == "" {
		return Check{}, false
	}
	what := "job " + job
	if task := getenv("SLURM_ARRAY_TASK_ID"); task != "" {
		what += fmt.Sprintf(" (array %s, task %s)", getenv("SLURM_ARRAY_JOB_ID"), task)
	}
	var slurmCgroups []string
	for _, line := range strings.Split(procCgroup, "\n") {
		// "6:freezer:/slurm_node/uid_0/job_2/step_batch" (v1) or
		// "0::/system.slice/slurmstepd.scope/job_2/step_batch/user/task_0" (v2)
		if _, rest, ok := strings.Cut(line, ":"); ok && (strings.Contains(rest, "/slurm") || strings.Contains(rest, "/job_")) {
			slurmCgroups = append(slurmCgroups, rest)
		}
	}
	c := Check{Name: "slurm", OK: true}
	if len(slurmCgroups) == 0 {
		c.Detail = what + ", no cgroup set by slurmd (proctrack/linuxproc): Slurm tracks this process by its pid only"
	} else {
		c.Detail = what + ", in cgroup " + strings.Join(slurmCgroups, ", ") + " set by slurmd"
	}
	cpus := getenv("SLURM_CPUS_PER_TASK")
	if cpus == "" {
		cpus = getenv("SLURM_CPUS_ON_NODE")
	}
	alloc := "the job's allocation"
	switch cpus {
	case "":
	case "1":
		alloc += " (1 CPU)"
	default:
		alloc += " (" + cpus + " CPUs)"
	}
	c.Detail += fmt.Sprintf("; sandboxes get cgroups of their own under --cgroup-parent %s, outside the job's: "+
		"Slurm's limits and accounting do not cover them, and scancel reaches them through sandcell "+
		"(SIGTERM cancels every run; after a SIGKILL the next sandcell on the node removes what is left). "+
		"Keep --concurrency and the runs' limits within %s", parent, alloc)
	return c, true
}

// usernsCheck says whether this user gets user namespaces (runc and
// gVisor need them) and, if not, why and what fixes it.
func usernsCheck(cfg *config.Config, rootless bool) Check {
	var u UserNS
	switch {
	case rootless:
		u = UserNS{Works: true} // this process runs in one
	case os.Geteuid() == 0:
		u = DiagnoseUserNS("/", nil, true)
	default:
		u = DiagnoseUserNS("/", ProbeUserNS(), false)
	}
	c := Check{Name: "user namespaces", Required: cfg.Isolation != "wasm", OK: u.Works, Fix: u.Fix}
	switch {
	case u.Works && os.Geteuid() == 0 && !rootless:
		c.Detail = "root makes them; unprivileged users can too"
	case u.Works:
		c.Detail = "an unprivileged user namespace works (runc and gVisor run rootless)"
	case os.Geteuid() == 0:
		// Root's own runs work; a rootless sandcell of a user does not.
		c.OK, c.Required = false, false
		c.Detail = "root's sandboxes work, but unprivileged users get none: " + u.Reason + "; they can use isolation wasm"
	default:
		c.Detail = "refused for this user: " + u.Reason + "; what works: isolation wasm (" + strings.Join(wasmWorks(false), ", ") + ")"
		c.Fix = u.Fix + "; or run with --isolation wasm"
	}
	return c
}

// wasmCheck describes isolation wasm, which needs nothing of the kernel.
func wasmCheck(cfg *config.Config) Check {
	kernel := cfg.NoKernelSandbox == ""
	d := "in-process WebAssembly (wazero, WASI preview 1), no kernel feature needed: " + strings.Join(wasmWorks(kernel), ", ")
	if !kernel {
		d += "; c, cpp and rust need a runc sandbox for their compilers, which this host cannot start"
	}
	return Check{Name: "wasm", Required: cfg.Isolation == "wasm", OK: true, Detail: d}
}

// wasmWorks lists the languages isolation wasm runs: all its languages
// with a kernel sandbox for the compilers, else those without a compile
// phase.
func wasmWorks(kernel bool) []string {
	var out []string
	for _, name := range rootfs.WasmLanguages() {
		l, err := rootfs.Lookup(name)
		if err != nil {
			continue
		}
		if v, err := l.WasmVariant(); err == nil && (kernel || !v.Compiled()) {
			out = append(out, name)
		}
	}
	return out
}

// missingControllers lists the controllers sandcell needs that the host
// lacks.
func missingControllers(mode limits.Mode) []string {
	var missing []string
	switch mode {
	case limits.Unified:
		have := " " + readTrim("/sys/fs/cgroup/cgroup.controllers") + " "
		for _, c := range []string{"memory", "pids", "cpu"} {
			if !strings.Contains(have, " "+c+" ") {
				missing = append(missing, c)
			}
		}
	case limits.Legacy, limits.Hybrid:
		for _, c := range []string{"memory", "pids", "cpu", "cpuacct"} {
			if _, err := os.Stat("/sys/fs/cgroup/" + c); err != nil {
				missing = append(missing, c)
			}
		}
	}
	return missing
}

func kernelHasSeccomp() bool {
	b, _ := os.ReadFile("/proc/self/status")
	return strings.Contains(string(b), "\nSeccomp:")
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// TierText says what a tier means for the user.
func TierText(t limits.Tier) string {
	switch t {
	case limits.TierRoot:
		return "tier 1 (root): every limit"
	case limits.TierDelegated:
		return "tier 2 (rootless, delegated cgroup): every limit"
	default:
		return "tier 3 (rootless, no cgroups): memory as address space, processes as RLIMIT_NPROC, no CPU share"
	}
}
