//go:build linux

package seccomp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sandcell/sandcell/internal/testutil"
)

// probeWant is what the probe (testdata/probes/syscalls.c) must print for
// one of its lines.
type probeWant struct {
	name string
	// want is the result under the profile.
	want string
	// control, if set, is the result without any seccomp filter in the same
	// container. It shows that the probe's arguments get past the syscall
	// entry, so the EPERM under the filter comes from seccomp and not from a
	// capability check. Only results fixed by the kernel's argument checks
	// are listed; ones that depend on kernel config or sysctls are not.
	control string
	// amd64 marks probes compiled only on x86-64.
	amd64 bool
}

var probeWants = []probeWant{
	{name: "ptrace", want: "EPERM", control: "ok"},
	{name: "process_vm_readv", want: "EPERM", control: "ok"},
	{name: "process_vm_writev", want: "EPERM", control: "ok"},
	{name: "process_madvise", want: "EPERM", control: "EBADF"},
	{name: "kcmp", want: "EPERM"},
	{name: "pidfd_getfd", want: "EPERM"},
	{name: "personality", want: "EPERM", control: "ok"},
	{name: "userfaultfd", want: "EPERM"},
	{name: "io_uring_setup", want: "EPERM"},
	{name: "io_uring_enter", want: "EPERM"},
	{name: "io_uring_register", want: "EPERM"},
	{name: "bpf", want: "EPERM"},
	{name: "perf_event_open", want: "EPERM"},
	{name: "keyctl", want: "EPERM", control: "ok"},
	{name: "add_key", want: "EPERM", control: "ENODEV"},
	{name: "request_key", want: "EPERM", control: "ENOKEY"},
	{name: "mount", want: "EPERM", control: "EINVAL"},
	{name: "umount2", want: "EPERM", control: "EINVAL"},
	{name: "pivot_root", want: "EPERM"},
	{name: "chroot", want: "EPERM"},
	{name: "unshare", want: "EPERM"},
	{name: "setns", want: "EPERM", control: "EBADF"},
	{name: "fsopen", want: "EPERM"},
	{name: "fsconfig", want: "EPERM"},
	{name: "fsmount", want: "EPERM"},
	{name: "fspick", want: "EPERM"},
	{name: "move_mount", want: "EPERM"},
	{name: "open_tree", want: "EPERM", control: "ok"},
	{name: "mount_setattr", want: "EPERM", control: "EINVAL"},
	{name: "init_module", want: "EPERM"},
	{name: "finit_module", want: "EPERM"},
	{name: "delete_module", want: "EPERM"},
	{name: "kexec_load", want: "EPERM"},
	{name: "kexec_file_load", want: "EPERM"},
	{name: "reboot", want: "EPERM"},
	{name: "clock_settime", want: "EPERM", control: "EINVAL"},
	{name: "settimeofday", want: "EPERM", control: "EINVAL"},
	{name: "adjtimex", want: "EPERM", control: "ok"},
	{name: "clock_adjtime", want: "EPERM", control: "ok"},
	{name: "name_to_handle_at", want: "EPERM", control: "EOVERFLOW"},
	{name: "open_by_handle_at", want: "EPERM"},
	{name: "syslog", want: "EPERM"},
	{name: "acct", want: "EPERM"},
	{name: "swapon", want: "EPERM"},
	{name: "quotactl", want: "EPERM", control: "EINVAL"},
	{name: "sethostname", want: "EPERM"},
	{name: "mbind", want: "EPERM", control: "ok"},
	{name: "set_mempolicy", want: "EPERM", control: "ok"},
	{name: "move_pages", want: "EPERM"},
	{name: "fanotify_init", want: "EPERM"},
	{name: "iopl", want: "EPERM", amd64: true},
	{name: "ioperm", want: "EPERM", amd64: true},
	{name: "modify_ldt", want: "EPERM", amd64: true},
	{name: "clone_newuser", want: "EPERM"},
	{name: "clone_newns", want: "EPERM"},
	{name: "clone_newnet", want: "EPERM"},
	{name: "clone3", want: "ENOSYS", control: "ok"},
	{name: "socket_alg", want: "EPERM"},
	{name: "socket_vsock", want: "EPERM"},
	{name: "socket_packet", want: "EPERM"},
	{name: "socket_inet_raw", want: "EPERM"},
	{name: "socket_inet6_raw", want: "EPERM"},
	{name: "socket_inet_packet", want: "EPERM"},
	{name: "socket_inet_ping", want: "EPERM"},
	{name: "socket_inet_mptcp", want: "EPERM"},
	{name: "socket_inet_sctp", want: "EPERM"},
	{name: "socket_netlink_netfilter", want: "EPERM"},
	{name: "socketpair_inet", want: "EPERM", control: "EOPNOTSUPP"},
	// The filter must not over-block. The "allowed_" prefix is part of the
	// probe's output contract (oci's TestSeccompDenials relies on it).
	{name: "allowed_socket_unix_stream", want: "ok", control: "ok"},
	{name: "allowed_socket_unix_dgram", want: "ok", control: "ok"},
	{name: "allowed_socket_inet_stream", want: "ok", control: "ok"},
	{name: "allowed_socket_inet_tcp", want: "ok", control: "ok"},
	{name: "allowed_socket_inet_udp", want: "ok", control: "ok"},
	{name: "allowed_socket_inet6_stream", want: "ok", control: "ok"},
	{name: "allowed_socket_inet6_dgram", want: "ok", control: "ok"},
	{name: "allowed_socket_netlink_route", want: "ok", control: "ok"},
	{name: "allowed_socketpair_unix", want: "ok", control: "ok"},
	{name: "allowed_pidfd_open", want: "ok", control: "ok"},
	{name: "allowed_clone", want: "ok", control: "ok"},
	{name: "allowed_fork", want: "ok", control: "ok"},
	{name: "allowed_pthread", want: "ok", control: "ok"},
	{name: "allowed_spawn", want: "ok", control: "ok"},
}

// exitSIGSYS is how runc reports a container killed by SIGSYS: 128 + 31.
const exitSIGSYS = 159

// TestProbeUnderRunc runs testdata/probes/syscalls.c in a runc container
// with Profile as its seccomp filter, and once without a filter as a
// control. It needs root, runc and gcc with a static glibc; it skips without
// them, except with CI=true, where it fails. Set SANDCELL_RUNC to test
// another runc binary (for example one built from the runc version in
// go.mod).
func TestProbeUnderRunc(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no containers")
	}
	r := newRuncEnv(t)
	filter, err := Profile()
	if err != nil {
		t.Fatal(err)
	}

	var filtered map[string]string
	t.Run("filtered", func(t *testing.T) {
		out, code := r.run(t, "filtered", filter, "all")
		if code != 0 {
			t.Fatalf("probe exit status %d, want 0", code)
		}
		got := parseProbe(t, out)
		filtered = got
		for _, w := range probeWants {
			if w.amd64 && runtime.GOARCH != "amd64" {
				continue
			}
			if got[w.name] != w.want {
				t.Errorf("%s = %q under the filter, want %q", w.name, got[w.name], w.want)
			}
		}
		checkProbeNames(t, got)
	})

	t.Run("control", func(t *testing.T) {
		out, code := r.run(t, "control", nil, "all")
		if code != 0 {
			t.Fatalf("probe exit status %d, want 0", code)
		}
		got := parseProbe(t, out)
		var b strings.Builder
		for _, w := range probeWants {
			if w.amd64 && runtime.GOARCH != "amd64" {
				continue
			}
			fmt.Fprintf(&b, "  %-26s filtered %-8s unfiltered %s\n", w.name, filtered[w.name], got[w.name])
			if w.control != "" && got[w.name] != w.control {
				t.Errorf("%s = %q without a filter, want %q: the probe no longer reaches the kernel's own checks", w.name, got[w.name], w.control)
			}
		}
		t.Logf("probe results:\n%s", b.String())
	})

	// Calls through a foreign syscall ABI, made by the probe's main process:
	// the container must die of SIGSYS, not get an errno.
	for _, mode := range []string{"int80", "x32"} {
		t.Run(mode, func(t *testing.T) {
			if runtime.GOARCH != "amd64" {
				t.Skipf("%s is an x86-64 ABI", mode)
			}
			out, code := r.run(t, mode, filter, mode)
			if code != exitSIGSYS {
				t.Errorf("probe %s: exit status %d, output %q; want %d (killed by SIGSYS)", mode, code, out, exitSIGSYS)
			}
		})
	}
}

// TestProbeWantsContract keeps the probe's output contract, which other
// packages' tests read without this table: names starting with "allowed_"
// must succeed, clone3 gets ENOSYS, everything else EPERM.
func TestProbeWantsContract(t *testing.T) {
	for _, w := range probeWants {
		want := "EPERM"
		switch {
		case strings.HasPrefix(w.name, "allowed_"):
			want = "ok"
		case w.name == "clone3":
			want = "ENOSYS"
		}
		if w.want != want {
			t.Errorf("probeWants %s = %q, want %q", w.name, w.want, want)
		}
	}
}

// checkProbeNames fails if the probe and probeWants list different probes.
func checkProbeNames(t *testing.T, got map[string]string) {
	t.Helper()
	want := map[string]bool{}
	for _, w := range probeWants {
		if !w.amd64 || runtime.GOARCH == "amd64" {
			want[w.name] = true
		}
	}
	for name := range got {
		if !want[name] {
			t.Errorf("probe prints %q, which probeWants does not list", name)
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("probe does not print %q", name)
		}
	}
}

// parseProbe reads "<name> <result>" lines.
func parseProbe(t *testing.T, out []byte) map[string]string {
	t.Helper()
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, result, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.Contains(result, " ") {
			t.Fatalf("probe line %q: want \"<name> <result>\"", sc.Text())
		}
		if _, dup := got[name]; dup {
			t.Fatalf("probe printed %q twice", name)
		}
		got[name] = result
	}
	return got
}

// runcEnv is a runc binary, a state directory and a rootfs holding only
// the static probe.
type runcEnv struct {
	runc     string
	stateDir string
	rootfs   string
	dir      string
}

func findRunc() (string, error) {
	if p := os.Getenv("SANDCELL_RUNC"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("runc"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/runc", "/usr/local/sbin/runc", "/usr/bin/runc"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("runc not found in PATH, /usr/sbin or /usr/local/sbin")
}

func newRuncEnv(t *testing.T) *runcEnv {
	t.Helper()
	testutil.Require(t, os.Geteuid() == 0, "needs root to run runc")
	runc, err := findRunc()
	testutil.Require(t, err == nil, "needs runc: %v", err)
	gcc, err := exec.LookPath("gcc")
	testutil.Require(t, err == nil, "needs gcc to build testdata/probes/syscalls.c: %v", err)

	// The container's root is uid 100000 on the host, which must be able
	// to reach the rootfs: t.TempDir makes 0700 directories.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &runcEnv{runc: runc, dir: dir, stateDir: filepath.Join(dir, "state"), rootfs: filepath.Join(dir, "rootfs")}
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(r.rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := filepath.Abs(filepath.Join("..", "testdata", "probes", "syscalls.c"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gcc, "-static", "-O2", "-Wall", "-o", filepath.Join(r.rootfs, "probe"), src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc -static %s: %v\n%s", src, err, out)
	}
	return r
}

// run starts the probe with args in a fresh container with the given
// filter (nil: none) and returns its output and exit status.
func (r *runcEnv) run(t *testing.T, name string, filter *specs.LinuxSeccomp, args ...string) ([]byte, int) {
	t.Helper()
	bundle := filepath.Join(r.dir, "bundle-"+name)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.MarshalIndent(probeSpec(r.rootfs, filter, append([]string{"/probe"}, args...)), "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}

	id := fmt.Sprintf("sandcell-seccomp-test-%d-%s", os.Getpid(), name)
	t.Cleanup(func() {
		// runc run removes the container when it exits; this covers a
		// timeout or a failed start. An error just means it is gone.
		_ = exec.Command(r.runc, "--root", r.stateDir, "delete", "--force", id).Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.runc, "--root", r.stateDir, "run", "--bundle", bundle, id)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return stdout.Bytes(), 0
	case ctx.Err() != nil:
		t.Fatalf("runc run %s: timed out\nstdout:\n%s\nstderr:\n%s", id, stdout.Bytes(), stderr.Bytes())
	case errors.As(err, &exitErr):
		code := exitErr.ExitCode()
		if stdout.Len() == 0 && code != exitSIGSYS {
			t.Fatalf("runc run %s: exit status %d and no output; stderr:\n%s", id, code, stderr.Bytes())
		}
		return stdout.Bytes(), code
	default:
		t.Fatalf("runc run %s: %v", id, err)
	}
	return nil, -1
}

// probeSpec is a minimal sandbox-like container: user namespace mapped to
// an unprivileged host range, no capabilities, no_new_privs, read-only root.
func probeSpec(rootfs string, filter *specs.LinuxSeccomp, args []string) *specs.Spec {
	idmap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args:            args,
			Env:             []string{"PATH=/"},
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: "probe",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=64k"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "size=1m"}},
		},
		Linux: &specs.Linux{
			UIDMappings: idmap,
			GIDMappings: idmap,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.UserNamespace},
			},
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"},
			ReadonlyPaths: []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"},
			Seccomp:       filter,
		},
	}
}
