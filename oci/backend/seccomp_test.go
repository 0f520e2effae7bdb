package backend_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/seccomp"
)

// buildProbe compiles testdata/probes/NAME (syscalls.c by default)
// statically with the host's gcc, so it runs in any layer.
func buildProbe(t *testing.T, name ...string) []byte {
	t.Helper()
	src := "syscalls.c"
	if len(name) > 0 {
		src = name[0]
	}
	out := filepath.Join(t.TempDir(), "probe")
	cmd := exec.Command("gcc", "-static", "-O2", "-o", out, "../../testdata/probes/"+src)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *testEnv) runProbe(t *testing.T, probe []byte, mode string) api.Phase {
	t.Helper()
	return e.run(t, "sh", "exec /work/probe "+mode+"\n", limits.Set{}, func(r *oci.Request) {
		r.Files = append(r.Files, api.File{Path: "probe", Data: probe, Mode: 0o755})
	})
}

// TestSeccompDenials runs the syscall probe in a sandbox: every denied
// syscall must fail with EPERM (clone3 with ENOSYS, so that libc falls back
// to clone, whose flags the filter can read), and the ordinary calls the
// probe also makes must still work.
func TestSeccompDenials(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		probe := buildProbe(t)
		res := e.runProbe(t, probe, "all")
		if res.Status != api.StatusOK {
			t.Fatalf("probe: status %s exit %d signal %s\n%s%s", res.Status, res.ExitCode, res.Signal, res.Stdout, res.Stderr)
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
			name, result, ok := strings.Cut(line, " ")
			if !ok {
				t.Fatalf("bad probe line %q", line)
			}
			got[name] = result
		}
		denied := 0
		for name, result := range got {
			want := "EPERM"
			switch {
			case e.backend == "gvisor" && gvisorUnimplemented[name] != nil:
				if !slices.Contains(gvisorUnimplemented[name], result) {
					t.Errorf("%s: got %s, want one of %v (gVisor)", name, result, gvisorUnimplemented[name])
				}
				continue
			case name == "clone3":
				want = "ENOSYS"
			case strings.HasPrefix(name, "allowed_"):
				want = "ok"
			default:
				denied++
			}
			if result != want {
				t.Errorf("%s: got %s, want %s", name, result, want)
			}
		}
		// Every syscall the profile denies by name is probed.
		for _, name := range seccomp.DeniedSyscalls() {
			if _, ok := got[name]; !ok && requiredDenials[name] {
				t.Errorf("required denial %s is not probed", name)
			}
		}
		if denied < 30 {
			t.Errorf("only %d denials probed", denied)
		}
	})
}

// gvisorUnimplemented are the probes that gVisor's kernel answers by
// itself, with its own error, whatever the filter says: it does not know
// these syscalls (the filter cannot name them) or these protocols. The
// first answer is Debian's 2022 runsc's; a second is a current runsc's
// (make runsc), which implements clone3 and pidfd_open (clone3 is then
// gVisor's own: its namespace flags make gVisor namespaces, never the
// host's) and knows pidfd_getfd, so the filter's EPERM applies.
var gvisorUnimplemented = map[string][]string{
	"pidfd_getfd": {"ENOSYS", "EPERM"}, "allowed_pidfd_open": {"ENOSYS", "ok"}, "clone3": {"ENOSYS", "ok"},
	"mount_setattr": {"ENOSYS"}, "process_madvise": {"ENOSYS"}, "socketpair_inet": {"ESOCKTNOSUPPORT"},
	"socket_inet_sctp": {"EPROTONOSUPPORT"}, "socket_inet_mptcp": {"EINVAL"},
}

// requiredDenials are the denials the sandbox promises (issue #2).
var requiredDenials = map[string]bool{
	"ptrace": true, "process_vm_readv": true, "process_vm_writev": true, "kcmp": true,
	"pidfd_getfd": true, "personality": true, "userfaultfd": true, "io_uring_setup": true,
	"bpf": true, "perf_event_open": true, "keyctl": true, "add_key": true, "request_key": true,
	"mount": true, "umount2": true, "pivot_root": true, "unshare": true, "setns": true,
	"init_module": true, "finit_module": true, "delete_module": true, "kexec_load": true,
	"kexec_file_load": true, "clock_settime": true, "settimeofday": true, "adjtimex": true,
}

// TestSeccompForeignArch: a 32-bit syscall (int 0x80) on x86_64 is another
// architecture's ABI, not in the filter: the kernel kills the process.
func TestSeccompForeignArch(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("int 0x80 exists only on x86")
	}
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		res := e.runProbe(t, buildProbe(t), "int80")
		if e.backend == "gvisor" {
			// gVisor's kernel has no 32-bit ABI: the call fails inside
			// the sandbox and never reaches the host.
			if res.Signal != "" || !strings.HasPrefix(res.Stdout, "int80 E") {
				t.Errorf("int 0x80 under gVisor: signal %q stdout %q, want a failed call", res.Signal, res.Stdout)
			}
			return
		}
		if res.Signal != "SIGSYS" {
			t.Errorf("int 0x80: status %s signal %q exit %d stdout %q, want death by SIGSYS", res.Status, res.Signal, res.ExitCode, res.Stdout)
		}
	})
}
