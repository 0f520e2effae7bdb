package doctor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Why user namespaces fail, and what works then. An unprivileged
// sandcell needs one user namespace of its own (cmd/sandcell re-executes
// into it) for runc and gVisor. Hosts refuse them for several reasons:
//
//   - Ubuntu 23.10 and later: kernel.apparmor_restrict_unprivileged_userns=1
//     lets only programs whose AppArmor profile allows `userns` make one
//     (Ubuntu ships such profiles for bubblewrap and the browsers); the
//     fix is the profile this project ships, packaging/apparmor.sandcell;
//   - Debian's older kernels: kernel.unprivileged_userns_clone=0;
//   - user.max_user_namespaces=0 (hardened kernels, some distributions);
//   - a seccomp filter of the container or CI runner sandcell itself runs
//     in (Docker's default profile refuses clone(CLONE_NEWUSER) and
//     unshare), which no sysctl shows.
//
// Isolation wasm needs none of this.

// Sysctls that govern unprivileged user namespaces.
const (
	sysctlAppArmor = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
	sysctlClone    = "/proc/sys/kernel/unprivileged_userns_clone"
	sysctlMax      = "/proc/sys/user/max_user_namespaces"
)

// AppArmorProfile is where the project's AppArmor profile for the
// sandcell binary lies in its source tree, and AppArmorInstall the
// command that installs it.
const (
	AppArmorProfile = "packaging/apparmor.sandcell"
	AppArmorInstall = "sudo install -m 0644 packaging/apparmor.sandcell /etc/apparmor.d/sandcell && sudo apparmor_parser -r /etc/apparmor.d/sandcell"
)

// UserNS is what the doctor found about user namespaces for this user.
type UserNS struct {
	// Works: an unprivileged process of this user made a user namespace
	// with a uid map (probed; for root, what a user would get is told by
	// the sysctls only).
	Works bool
	// Reason says why not, Fix what fixes it (a command, or the profile).
	Reason, Fix string
	// AppArmor: the AppArmor restriction is on.
	AppArmor bool
}

// sysctls reads the knobs that refuse unprivileged user namespaces; a
// file that does not exist is a knob this kernel lacks.
func sysctls(root string) (apparmor, clone, maxNS string) {
	return readTrim(filepath.Join(root, sysctlAppArmor)), readTrim(filepath.Join(root, sysctlClone)), readTrim(filepath.Join(root, sysctlMax))
}

// DiagnoseUserNS tells why unprivileged user namespaces fail here, from
// the sysctls under root ("/" on a real host) and, for a user, probe's
// error (nil: it worked; root passes none).
func DiagnoseUserNS(root string, probe error, isRoot bool) UserNS {
	apparmor, clone, maxNS := sysctls(root)
	u := UserNS{Works: probe == nil && !isRoot, AppArmor: apparmor == "1"}
	var why []string
	if probe != nil {
		why = append(why, "making one failed: "+probe.Error())
	}
	switch {
	case u.AppArmor:
		why = append(why, "kernel.apparmor_restrict_unprivileged_userns=1 (AppArmor allows them only to programs whose profile says userns)")
		u.Fix = "install the AppArmor profile sandcell ships for its binary: " + AppArmorInstall +
			" (it attaches to /usr/bin/sandcell and /usr/local/bin/sandcell; edit the path for another install)"
	case clone == "0":
		why = append(why, "kernel.unprivileged_userns_clone=0")
		u.Fix = "sudo sysctl -w kernel.unprivileged_userns_clone=1"
	case maxNS == "0":
		why = append(why, "user.max_user_namespaces=0")
		u.Fix = "sudo sysctl -w user.max_user_namespaces=15000"
	case probe != nil:
		why = append(why, "no sysctl refuses them: a seccomp filter or the container sandcell runs in does (Docker's default profile refuses clone(CLONE_NEWUSER))")
		u.Fix = "run sandcell outside that container, or with a seccomp profile that allows user namespaces"
	}
	if isRoot && len(why) == 0 {
		u.Works = true
	}
	u.Reason = strings.Join(why, "; ")
	return u
}

// ProbeUserNS makes a user namespace as this user, mapping only its own
// ids as rootless sandcell does, and runs /bin/true in it: nil when that
// works. Root always can; it is probed only for a user.
func ProbeUserNS() error {
	exe := "/bin/true"
	if _, err := os.Stat(exe); err != nil {
		exe = "/usr/bin/true"
	}
	uid, gid := os.Getuid(), os.Getgid()
	cmd := exec.Command(exe)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("clone(CLONE_NEWUSER): %w", err)
	}
	return nil
}
