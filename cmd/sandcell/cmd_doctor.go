package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// check is one line of the doctor's report.
type check struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"`
	Detail   string `json:"detail"`
	Fix      string `json:"fix,omitempty"` // the command that fixes it
}

// cmdDoctor: sandcell doctor [--json] reports what the host supports and,
// for each missing piece, the command that fixes it. Exit 1 when a required
// piece is missing.
func cmdDoctor(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	checks := doctorChecks(ctx, env.cfg)
	failed := false
	for _, c := range checks {
		if c.Required && !c.OK {
			failed = true
		}
	}
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"ok": !failed, "checks": checks})
	} else {
		for _, c := range checks {
			mark := "ok  "
			switch {
			case !c.OK && c.Required:
				mark = "FAIL"
			case !c.OK:
				mark = "warn"
			}
			fmt.Fprintf(env.stdout, "%s  %-16s %s\n", mark, c.Name, c.Detail)
			if !c.OK && c.Fix != "" {
				fmt.Fprintf(env.stdout, "      %-16s fix: %s\n", "", c.Fix)
			}
		}
	}
	if failed {
		return 1
	}
	return 0
}

func doctorChecks(ctx context.Context, cfg Config) []check {
	var cs []check
	mode := limits.DetectMode()
	uid, _, rootless := rootlessIDs()
	tc := check{Name: "tier", Required: true, OK: true, Detail: tierText(limits.TierRoot)}
	if rootless {
		d := limits.DetectDelegation(limits.DelegatedConfig{UID: uid, User: userName(uid), Mode: mode})
		tc.Detail = tierText(d.Tier) + "; " + d.String()
		if d.Tier != limits.TierDelegated {
			// A warning: runs work, with fewer limits.
			tc.OK, tc.Required, tc.Fix = false, false, d.Fix
		}
	}
	cs = append(cs, tc)

	cg := check{Name: "cgroups", Required: !rootless, OK: mode != limits.Unavailable, Detail: "mode " + mode.String()}
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

	userns := readTrim("/proc/sys/user/max_user_namespaces")
	cs = append(cs, check{Name: "user namespaces", Required: true, OK: userns != "" && userns != "0",
		Detail: "max_user_namespaces=" + userns, Fix: "sysctl -w user.max_user_namespaces=15000"})

	ok, ver := oci.SeccompSupport()
	sc := check{Name: "seccomp", Required: true, OK: ok && kernelHasSeccomp(), Detail: "libseccomp " + ver}
	if !ok {
		sc.Detail = "this binary was built without seccomp support"
		sc.Fix = "apt-get install libseccomp-dev && make build   (cgo with -tags seccomp)"
	}
	cs = append(cs, sc)

	fsys, _ := os.ReadFile("/proc/filesystems")
	cs = append(cs, check{Name: "overlayfs", Required: false, OK: strings.Contains(string(fsys), "\toverlay\n"),
		Detail: "for shared read-only layers", Fix: "modprobe overlay"})

	runsc := check{Name: "runsc", Required: cfg.Isolation == "gvisor", Detail: "gVisor isolation (--isolation gvisor)", Fix: "apt-get install runsc"}
	if info, err := oci.ProbeRunsc(cfg.runscPath()); err == nil {
		platform, perr := info.ChoosePlatform(oci.RunscConfig{Platform: cfg.RunscPlatform, AllowKVM: cfg.RunscAllowKVM})
		runsc.OK = perr == nil
		runsc.Detail = fmt.Sprintf("%s, %s, platforms %s, using %s", info.Path, info.Version, strings.Join(info.Platforms, "/"), platform)
		if _, _, rootless := rootlessIDs(); rootless {
			runsc.Detail += "; rootless: runsc --rootless in sandcell's user namespace, CPU time by sandcell's watchdog"
		}
		if perr != nil {
			runsc.Detail, runsc.Fix = perr.Error(), "choose --runsc-platform from: "+strings.Join(info.Platforms, ", ")
		}
	}
	cs = append(cs, runsc)

	mm := check{Name: "mmdebstrap", Required: false, Detail: "builds language layers from Debian packages", Fix: "apt-get install mmdebstrap"}
	if p, err := exec.LookPath("mmdebstrap"); err == nil {
		mm.OK, mm.Detail = true, p
	}
	cs = append(cs, mm)

	store := &rootfs.Store{Dir: cfg.LayerDir, Shared: cfg.SharedLayerDirs}
	for _, l := range rootfs.Languages() {
		c := check{Name: "layer " + l.Name, Required: false, OK: true, Detail: "built in " + cfg.LayerDir}
		if built, err := store.Built(l); err != nil || !built {
			c.OK, c.Detail, c.Fix = false, "not built", "sandcell rootfs build "+l.Name
		}
		cs = append(cs, c)
	}
	return cs
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

// commandVersion runs "path args..." for at most 5 s and returns its first
// output line.
func commandVersion(ctx context.Context, path string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		return "(version unknown: " + err.Error() + ")"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
