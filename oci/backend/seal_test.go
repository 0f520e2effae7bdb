package backend_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
)

// selfExeEnv set makes this test binary print what its /proc/self/exe is
// (its link and its device and inode) and exit: TestSelfExeIsSealed starts
// it inside a sandbox as /proc/self/exe.
const selfExeEnv = "SANDCELL_TEST_SELF_EXE"

func printSelfExe() {
	link, _ := os.Readlink("/proc/self/exe")
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		fmt.Fprintln(os.Stderr, "stat /proc/self/exe:", err)
		os.Exit(2)
	}
	fmt.Printf("%d:%d %s\n", st.Dev, st.Ino, link)
	os.Exit(0)
}

// TestSelfExeIsSealed: a run whose argv[0] is /proc/self/exe (an image's
// Entrypoint, an MCP run_command argv) executes the file its PID 1 was
// started from. That must be a sealed copy of the binary, never the host's
// file (CVE-2019-5736: the host's runc binary overwritten through
// /proc/self/exe). The fork server's runs are cloned from the zygote, which
// was started from the binary on disk; libcontainer's init runs from
// its sealed copy (a read-only overlay of it, by runc v1.2's exeseal; ours
// is a sealed memfd). The binary is this test binary; the run gets the
// libseccomp it links (the layers have none) through LD_LIBRARY_PATH.
func TestSelfExeIsSealed(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var host syscall.Stat_t
	if err := syscall.Stat(self, &host); err != nil {
		t.Fatal(err)
	}
	// A static test binary (the cgroup v2 VM's) needs no libseccomp; the
	// guest has none to give.
	lib, err := os.ReadFile("/lib/x86_64-linux-gnu/libseccomp.so.2")
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("the test binary's libseccomp: %v", err)
	}
	for name, newEnv := range map[string]func(testing.TB) *testEnv{"runc": newTestEnv, "forkserver": newForkEnv} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			res := e.run(t, "python", "", limits.Set{}, func(r *oci.Request) {
				r.Args = []string{"/proc/self/exe"}
				r.Env = []string{selfExeEnv + "=1", "LD_LIBRARY_PATH=/work"}
				if lib != nil {
					r.Files = append(r.Files, api.File{Path: "libseccomp.so.2", Data: lib, Mode: 0o644})
				}
			})
			if name == "runc" && res.Status == api.StatusError && res.ExitCode == 255 && res.Stdout == "" {
				// On the libcontainer path the program is forked by the
				// run's init (runinit_linux.go), a sealed memfd of a few
				// KiB: /proc/self/exe is that init, which refuses to run
				// as anything but PID 1. Neither the host's binary nor
				// a copy of it ran.
				return
			}
			if res.Status != api.StatusOK {
				t.Fatalf("status %s exit %d signal %s: %s\n%s%s", res.Status, res.ExitCode, res.Signal, res.Message, res.Stdout, res.Stderr)
			}
			var dev, ino uint64
			var link string
			if _, err := fmt.Sscanf(res.Stdout, "%d:%d %s", &dev, &ino, &link); err != nil {
				t.Fatalf("output %q: %v", res.Stdout, err)
			}
			if dev == host.Dev && ino == host.Ino {
				t.Fatalf("the run executed the host's binary %s (%d:%d, seen inside as %q)", self, dev, ino, link)
			}
		})
	}
}

// procStatus reads the fields of /proc/<pid>/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// TestForkServerCapabilities: the zygote holds only the capabilities it
// uses (CAP_SETUID and CAP_SETGID for the id maps, CAP_SYS_RESOURCE for
// oom_score_adj), in every set, the bounding set included; its keeper
// holds none and runs under a seccomp filter of its own. Before, both ran
// with every capability of host root and no filter.
func TestForkServerCapabilities(t *testing.T) {
	e := newForkEnv(t)
	if res := e.run(t, "sh", "echo one", limits.Set{}); res.Status != api.StatusOK || res.Stdout != "one\n" {
		t.Fatalf("run: %s %q %q", res.Status, res.Stdout, res.Stderr)
	}
	pid := backend.ZygotePid(e.rt)
	if pid == 0 {
		t.Fatal("no fork server after a run")
	}
	// CAP_SETGID, CAP_SETUID, CAP_SYS_RESOURCE, of those this test has
	// (a container may run it without CAP_SYS_RESOURCE).
	own, err := strconv.ParseUint(procStatus(t, os.Getpid())["CapEff"], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	zygoteCaps := fmt.Sprintf("%016x", own&(1<<6|1<<7|1<<24))
	z := procStatus(t, pid)
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if z[f] != zygoteCaps {
			t.Errorf("zygote %s %s, want %s", f, z[f], zygoteCaps)
		}
	}
	for _, f := range []string{"CapInh", "CapAmb"} {
		if z[f] != "0000000000000000" {
			t.Errorf("zygote %s %s, want none", f, z[f])
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	kids := strings.Fields(string(b))
	if len(kids) != 1 {
		t.Fatalf("zygote children %v, want its keeper", kids)
	}
	keeper, _ := strconv.Atoi(kids[0])
	k := procStatus(t, keeper)
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"} {
		if k[f] != "0000000000000000" {
			t.Errorf("keeper %s %s, want none", f, k[f])
		}
	}
	// The keeper's own filter (keeper_seccomp); the zygote has none: its
	// runs would inherit it (SECURITY.md, the fork server).
	if k["Seccomp"] != "2" || k["NoNewPrivs"] != "1" {
		t.Errorf("keeper Seccomp %s NoNewPrivs %s, want a filter (2) and no_new_privs", k["Seccomp"], k["NoNewPrivs"])
	}
	if z["Seccomp"] != "0" {
		t.Errorf("zygote Seccomp %s: a filter of its own would be every run's too", z["Seccomp"])
	}
}
