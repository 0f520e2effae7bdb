/* Namespace and mount escapes: with a new user namespace (unshare or clone)
 * an unprivileged process becomes "root" there and may mount, which opens
 * the namespaced mount code to it (many CVEs: CVE-2022-0185 fsconfig heap
 * overflow, CVE-2023-0386 overlayfs). setns into another namespace, a
 * pivot_root or chroot out of the root, and the new mount API (open_tree
 * with OPEN_TREE_CLONE copies a mount tree) must all be refused. */
#include "probe.h"
#include <sched.h>
#include <sys/mount.h>

/* clone_ns forks with namespace flags; the child exits at once. */
static long clone_ns(unsigned long flags) {
	long pid = syscall(SYS_clone, flags | SIGCHLD, 0, NULL, NULL, 0);
	if (pid == 0)
		_exit(0);
	if (pid < 0)
		return -1;
	waitpid(pid, NULL, 0);
	return 0;
}

int main(void) {
	PROBE("mount_tmpfs", mount("none", "/tmp", "tmpfs", MS_NOUSER, NULL));
	PROBE("mount_bind_root", mount("/", "/tmp", NULL, MS_BIND | MS_NOUSER, NULL));
	PROBE("umount_proc", umount2("/proc", 0x80000000));
	PROBE("unshare_user", unshare(CLONE_NEWUSER));
	PROBE("unshare_mount", unshare(CLONE_NEWNS));
	PROBE("unshare_net", unshare(CLONE_NEWNET));
	PROBE("unshare_pid", unshare(CLONE_NEWPID));
	PROBE("unshare_cgroup", unshare(CLONE_NEWCGROUP));
	PROBE("clone_newuser", clone_ns(CLONE_NEWUSER));
	PROBE("clone_newns", clone_ns(CLONE_NEWNS));
	PROBE("setns_own_mnt", setns(open("/proc/self/ns/mnt", O_RDONLY), 0));
	PROBE("setns_init_net", setns(open("/proc/1/ns/net", O_RDONLY), CLONE_NEWNET));
	PROBE("pivot_root", syscall(SYS_pivot_root, "/sandcell-none", "/sandcell-none"));
	PROBE("chroot", chroot("/sandcell-none"));
	PROBE("fsopen", syscall(SYS_fsopen, "tmpfs", 0));
	PROBE("open_tree_clone", syscall(SYS_open_tree, AT_FDCWD, "/", 1 /* OPEN_TREE_CLONE */ | O_CLOEXEC));
	PROBE("move_mount", syscall(SYS_move_mount, -1, "", AT_FDCWD, "/tmp", 0));
	say("done\n");
	return 0;
}
