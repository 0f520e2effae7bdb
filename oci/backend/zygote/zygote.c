/*
 * sandcell's fork server (the "zygote").
 *
 * When this binary starts with SCZ_ENV set, the constructor below runs
 * before Go's runtime and never returns: the process serves sandcell's
 * requests on the socket SCZ_ENV names. For each request it clone3()s a
 * child with fresh namespaces (CLONE_PARENT: the child is sandcell's own
 * child, so sandcell reaps it and learns its exit status), writes the
 * child's uid/gid maps and oom_score_adj from outside, and
 * hands sandcell a pidfd. The child then sets itself up exactly as
 * runc's init does for the same libcontainer config (each step below
 * names the runc v1.5.3 function it mirrors), waits for SCZ_GO and execs
 * the program.
 *
 * What it defends against: nothing untrusted ever talks to the zygote.
 * Its only input is sandcell's socket; a run cannot reach it (another pid
 * namespace, no shared fd, its own mount, net, ipc, uts and user
 * namespaces) and the child drops the zygote's socket before anything
 * else. See SECURITY.md ("The fork server").
 *
 * Without SCZ_ENV the constructor returns at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/keyctl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include "zygote.h"

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef MS_NOSYMFOLLOW
#define MS_NOSYMFOLLOW 256
#endif
#ifndef ST_NOSYMFOLLOW
#define ST_NOSYMFOLLOW 0x2000
#endif

static int zygote_sock = -1;
static int keeper_sock = -1; /* the keeper's socket ("Runs end with sandcell") */

/* The most fds a request carries. */
#define MAX_FDS (5 + SCZ_MAX_EXTRA + SCZ_MAX_SOURCES + SCZ_MAX_TASKS + 1)

/* ------------------------------------------------------------------ */
/* The child's plan                                                     */

struct mnt {
	uint32_t flags, cleared, nprop;
	int srcfd; /* a detached copy of a bind's source (open_tree), or -1 */
	const uint32_t *prop;
	const char *device, *source, *dest;
	char *data; /* may be rewritten (the tmpfs mode= prefix) */
};

#define MAX_LIST 4096

struct plan {
	const char *rootfs;
	uint32_t rootprop;
	int readonlyfs;
	struct mnt mounts[64];
	int nmounts;
	const char *devices[32];
	int ndevices;
	int setupdev;
	const char *hostname, *domainname;
	const char *ropaths[32];
	int nropaths;
	const char *maskpaths[32];
	int nmaskpaths;
	int nnp;
	uint32_t seccomp_flags;
	const struct sock_filter *bpf;
	uint32_t bpf_len;
	const char *keyring;
	uint32_t keyperm;
	int loopback;
	int cgroupns;
	const char *cwd;
	char **argv;
	int argc;
	char **envp;
	int envc;
	const char *path;
	uint32_t uid, gid;
	int setgroups, setgroups0;
	uint32_t umask;
};

/* The child's state for error reports. */
static int child_sync = -1;
/* The root filesystem's host path (mountpoints must resolve inside it). */
static const char *rootfs_path = "";
/* The request's mount sources (fds of the child), for parse_mount. */
static int *child_sources;
static uint32_t child_nsources;

static void child_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void child_fail(const char *fmt, ...)
{
	char buf[SCZ_MSG_LEN];
	int saved = errno;
	buf[0] = SCZ_ERROR;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + 1, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	if (saved != 0) {
		int m = snprintf(buf + 1 + n, sizeof(buf) - 1 - n, ": %s", strerror(saved));
		if (m > 0)
			n += m;
		if (n > (int)sizeof(buf) - 2)
			n = sizeof(buf) - 2;
	}
	if (child_sync >= 0)
		(void)!send(child_sync, buf, 1 + n, MSG_NOSIGNAL);
	_exit(1);
}

/* Each helper that can fail sets errno; child_fail appends strerror. */
#define CHECK(expr, ...)                      \
	do {                                  \
		errno = 0;                    \
		if ((expr) < 0)               \
			child_fail(__VA_ARGS__); \
	} while (0)

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* str returns a NUL-terminated copy of a record's payload. */
static char *str(const unsigned char *p, uint32_t len)
{
	char *s = malloc(len + 1);
	if (!s)
		child_fail("out of memory");
	memcpy(s, p, len);
	s[len] = 0;
	return s;
}

static void parse_mount(struct plan *pl, const unsigned char *p, uint32_t len)
{
	if (pl->nmounts >= (int)(sizeof(pl->mounts) / sizeof(pl->mounts[0])))
		child_fail("plan: too many mounts");
	if (len < 32)
		child_fail("plan: short mount record");
	struct mnt *m = &pl->mounts[pl->nmounts++];
	m->flags = get32(p);
	m->cleared = get32(p + 4);
	m->nprop = get32(p + 8);
	uint32_t src = get32(p + 12);
	if (src > child_nsources)
		child_fail("plan: mount source %u of %u", src, child_nsources);
	m->srcfd = src ? child_sources[src - 1] : -1;
	p += 4;
	len -= 4;
	uint32_t l[4];
	for (int i = 0; i < 4; i++)
		l[i] = get32(p + 12 + 4 * i);
	uint64_t need = 28 + 4ull * m->nprop;
	for (int i = 0; i < 4; i++)
		need += (uint64_t)l[i] + 1;
	if (need > len || m->nprop > 8)
		child_fail("plan: bad mount record");
	uint32_t *prop = malloc(4 * (m->nprop + 1));
	if (!prop)
		child_fail("out of memory");
	for (uint32_t i = 0; i < m->nprop; i++)
		prop[i] = get32(p + 28 + 4 * i);
	m->prop = prop;
	const unsigned char *s = p + 28 + 4 * m->nprop;
	char *f[4];
	for (int i = 0; i < 4; i++) {
		f[i] = str(s, l[i]);
		s += l[i] + 1;
	}
	m->device = f[0];
	m->source = f[1];
	m->dest = f[2];
	m->data = f[3];
}

static void add_list(const char **list, int *n, int max, const char *s, const char *what)
{
	if (*n >= max)
		child_fail("plan: too many %s", what);
	list[(*n)++] = s;
}

static void parse_plan(struct plan *pl, const unsigned char *buf, size_t size)
{
	memset(pl, 0, sizeof(*pl));
	/* argv and envp sized to the plan's records (a first pass counts
	 * them): calloc of MAX_LIST pointers each cleared 64 KiB, 16 page
	 * faults of every child (BENCHMARKS.md, issue #18). */
	size_t nargs = 0, nenv = 0;
	for (size_t o = 0; o + 8 <= size;) {
		uint32_t key = get32(buf + o), len = get32(buf + o + 4);
		o += 8;
		if (len > size - o)
			break; /* reported by the pass below */
		nargs += key == SCZ_P_ARG;
		nenv += key == SCZ_P_ENV;
		o += (len + 3) & ~3u;
	}
	if (nargs > MAX_LIST)
		child_fail("plan: too many arguments");
	if (nenv > MAX_LIST)
		child_fail("plan: too many environment entries");
	pl->argv = calloc(nargs + 1, sizeof(char *));
	pl->envp = calloc(nenv + 1, sizeof(char *));
	if (!pl->argv || !pl->envp)
		child_fail("out of memory");
	size_t off = 0;
	while (off + 8 <= size) {
		uint32_t key = get32(buf + off), len = get32(buf + off + 4);
		off += 8;
		if (len > size - off)
			child_fail("plan: record %u overruns the plan", key);
		const unsigned char *p = buf + off;
		off += (len + 3) & ~3u;
		switch (key) {
		case SCZ_P_ROOTFS: pl->rootfs = str(p, len); break;
		case SCZ_P_ROOTPROP: pl->rootprop = len >= 4 ? get32(p) : 0; break;
		case SCZ_P_READONLYFS: pl->readonlyfs = len >= 4 && get32(p); break;
		case SCZ_P_MOUNT: parse_mount(pl, p, len); break;
		case SCZ_P_DEVICE: add_list(pl->devices, &pl->ndevices, 32, str(p, len), "devices"); break;
		case SCZ_P_SETUPDEV: pl->setupdev = len >= 4 && get32(p); break;
		case SCZ_P_HOSTNAME: pl->hostname = str(p, len); break;
		case SCZ_P_DOMAINNAME: pl->domainname = str(p, len); break;
		case SCZ_P_ROPATH: add_list(pl->ropaths, &pl->nropaths, 32, str(p, len), "read-only paths"); break;
		case SCZ_P_MASKPATH: add_list(pl->maskpaths, &pl->nmaskpaths, 32, str(p, len), "masked paths"); break;
		case SCZ_P_NNP: pl->nnp = len >= 4 && get32(p); break;
		case SCZ_P_SECCOMP_FLAGS: pl->seccomp_flags = len >= 4 ? get32(p) : 0; break;
		case SCZ_P_SECCOMP_BPF:
			if (len % sizeof(struct sock_filter) || len == 0 || len / sizeof(struct sock_filter) > BPF_MAXINSNS)
				child_fail("plan: bad seccomp program of %u bytes", len);
			pl->bpf = malloc(len);
			if (!pl->bpf)
				child_fail("out of memory");
			memcpy((void *)pl->bpf, p, len);
			pl->bpf_len = len / sizeof(struct sock_filter);
			break;
		case SCZ_P_KEYRING: pl->keyring = str(p, len); break;
		case SCZ_P_KEYPERM: pl->keyperm = len >= 4 ? get32(p) : 0; break;
		case SCZ_P_LOOPBACK: pl->loopback = len >= 4 && get32(p); break;
		case SCZ_P_CGROUPNS: pl->cgroupns = len >= 4 && get32(p); break;
		case SCZ_P_CWD: pl->cwd = str(p, len); break;
		case SCZ_P_ARG:
			if (pl->argc >= MAX_LIST)
				child_fail("plan: too many arguments");
			pl->argv[pl->argc++] = str(p, len);
			break;
		case SCZ_P_ENV:
			if (pl->envc >= MAX_LIST)
				child_fail("plan: too many environment entries");
			pl->envp[pl->envc++] = str(p, len);
			break;
		case SCZ_P_PATH: pl->path = str(p, len); break;
		case SCZ_P_UID: pl->uid = len >= 4 ? get32(p) : 0; break;
		case SCZ_P_GID: pl->gid = len >= 4 ? get32(p) : 0; break;
		case SCZ_P_SETGROUPS: pl->setgroups = len >= 4 && get32(p); break;
		case SCZ_P_SETGROUPS0: pl->setgroups0 = len >= 4 && get32(p); break;
		case SCZ_P_UMASK: pl->umask = len >= 4 ? get32(p) : 022; break;
		case SCZ_P_END: return;
		default: child_fail("plan: unknown record %u", key);
		}
	}
	child_fail("plan: no end record");
}

/* ------------------------------------------------------------------ */
/* Paths inside the root (runc's internal/pathrs)                       */

static char procfd_buf[4][64];

/* procfd names an fd through /proc, as runc's utils.WithProcfdFile does. */
static const char *procfd(int slot, int fd)
{
	snprintf(procfd_buf[slot], sizeof(procfd_buf[slot]), "/proc/self/fd/%d", fd);
	return procfd_buf[slot];
}

static int open_in_root(int rootfd, const char *path, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)flags | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	while (*path == '/')
		path++;
	if (!*path)
		path = ".";
	return syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
}

/* mkdir_all_in_root is pathrs.MkdirAllInRoot: every missing component of
 * path is created with mode, resolved inside the root. Returns an O_PATH fd. */
static int mkdir_all_in_root(int rootfd, const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	if (strlen(path) >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(buf, path);
	int fd = open_in_root(rootfd, "/", O_PATH | O_DIRECTORY);
	if (fd < 0)
		return -1;
	char *save = NULL;
	for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (strcmp(c, ".") == 0)
			continue;
		if (strcmp(c, "..") == 0) {
			close(fd);
			errno = EINVAL;
			return -1;
		}
		int next = openat(fd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT) {
			if (mkdirat(fd, c, mode) < 0 && errno != EEXIST) {
				close(fd);
				return -1;
			}
			next = openat(fd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (next < 0 && errno == ELOOP) {
			/* A symlink: resolve it inside the root, as pathrs does. */
			char sofar[PATH_MAX];
			size_t n = (size_t)(c - buf) + strlen(c);
			memcpy(sofar, path, n);
			sofar[n] = 0;
			next = open_in_root(rootfd, sofar, O_PATH | O_DIRECTORY);
		}
		close(fd);
		if (next < 0)
			return -1;
		fd = next;
	}
	return fd;
}

/* split_parent: the directory part and the name of path. */
static void split_parent(const char *path, char *dir, size_t dirlen, const char **name)
{
	const char *slash = strrchr(path, '/');
	if (!slash) {
		snprintf(dir, dirlen, "/");
		*name = path;
		return;
	}
	size_t n = (size_t)(slash - path);
	if (n >= dirlen)
		n = dirlen - 1;
	memcpy(dir, path, n);
	dir[n] = 0;
	if (n == 0)
		snprintf(dir, dirlen, "/");
	*name = slash + 1;
}

/* ------------------------------------------------------------------ */
/* Mounts (runc's rootfs_linux.go)                                      */

static int is_dev_dest(const char *dest)
{
	while (*dest == '/')
		dest++;
	size_t n = strlen(dest);
	while (n > 0 && dest[n - 1] == '/')
		n--;
	return n == 3 && strncmp(dest, "dev", 3) == 0;
}

/* reopen_after_mount re-resolves dest inside the root: the new mount's top. */
static int reopen_after_mount(int rootfd, const char *dest)
{
	return open_in_root(rootfd, dest, O_PATH);
}

/* mount_propagate is mountEntry.mountPropagate. It takes ownership of
 * *dstfd; with top set, *dstfd is then the new mount's top (runc always
 * reopens it; here only a caller that goes on to use it pays the lookup). */
static void mount_propagate(int rootfd, struct mnt *m, int *dstfd, int top)
{
	uint32_t flags = m->flags;
	/* tmpfs and /dev are mounted read-write first; finalize_rootfs remounts them. */
	if (strcmp(m->device, "tmpfs") == 0 || is_dev_dest(m->dest))
		flags &= ~MS_RDONLY;
	if (m->srcfd >= 0) {
		/* A bind's source sandcell cloned on the host (runc's
		 * mountSourceOpenTree): the child, root of a user namespace
		 * mapped to unprivileged host ids, may not traverse the
		 * directories above the source (a 0700 state dir), and a plain
		 * fd of it names a mount of another mount namespace, which
		 * mount(MS_BIND) refuses; a detached copy moves into place. */
		CHECK(syscall(SYS_move_mount, m->srcfd, "", *dstfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
		      "move_mount %s on %s", m->source, m->dest);
		close(m->srcfd);
		m->srcfd = -1;
	} else {
		CHECK(mount(m->source, procfd(0, *dstfd), m->device, flags, m->data[0] ? m->data : NULL),
		      "mount %s on %s (%s)", m->source, m->dest, m->device);
	}
	if (!top && m->nprop == 0)
		return;
	int fd = reopen_after_mount(rootfd, m->dest);
	CHECK(fd, "reopen mountpoint %s after mount", m->dest);
	close(*dstfd);
	*dstfd = fd;
	for (uint32_t i = 0; i < m->nprop; i++)
		CHECK(mount("", procfd(0, *dstfd), "", m->prop[i], NULL), "set propagation of %s", m->dest);
}

/* statfs_to_mount_flags is runc's statfsToMountFlags. */
static uint32_t statfs_to_mount_flags(const struct statfs *st)
{
	static const struct {
		unsigned long st;
		uint32_t ms;
	} map[] = {
		{ST_RDONLY, MS_RDONLY}, {ST_NOSUID, MS_NOSUID}, {ST_NODEV, MS_NODEV},
		{ST_NOEXEC, MS_NOEXEC}, {ST_MANDLOCK, MS_MANDLOCK}, {ST_SYNCHRONOUS, MS_SYNCHRONOUS},
		{ST_NOATIME, MS_NOATIME}, {ST_NODIRATIME, MS_NODIRATIME}, {ST_RELATIME, MS_RELATIME},
		{ST_NOSYMFOLLOW, MS_NOSYMFOLLOW},
	};
	uint32_t flags = 0;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if ((st->f_flags & map[i].st) == map[i].st)
			flags |= map[i].ms;
	if ((flags & (MS_NOATIME | MS_RELATIME | MS_STRICTATIME)) == 0)
		flags |= MS_STRICTATIME;
	return flags;
}

#define LOCK_FLAGS (MS_RDONLY | MS_NODEV | MS_NOEXEC | MS_NOSUID | MS_NOATIME | MS_RELATIME | MS_STRICTATIME | MS_NODIRATIME)
#define ATIME_FLAGS (MS_NOATIME | MS_RELATIME | MS_STRICTATIME | MS_NODIRATIME)

/* check_proc_mount is runc's checkProcMount for destinations given as
 * container paths: only a proc (or a bind of one) on /proc itself, and
 * nothing below /proc. */
static void check_proc_mount(const struct mnt *m)
{
	const char *d = m->dest;
	while (*d == '/')
		d++;
	if (strncmp(d, "proc", 4) != 0 || (d[4] != 0 && d[4] != '/'))
		return;
	const char *rest = d + 4;
	while (*rest == '/')
		rest++;
	if (*rest == 0) {
		if (strcmp(m->device, "proc") == 0)
			return;
		errno = 0;
		child_fail("%s cannot be mounted because it is not of type proc", m->dest);
	}
	errno = 0;
	child_fail("%s cannot be mounted because it is inside /proc", m->dest);
}

/* create_open_mountpoint is mountEntry.createOpenMountpoint. */
static int create_open_mountpoint(int rootfd, struct mnt *m)
{
	int fd = open_in_root(rootfd, m->dest, O_PATH);
	if (fd >= 0 && strcmp(m->device, "tmpfs") == 0) {
		struct stat st;
		CHECK(fstat(fd, &st), "check tmpfs source mode of %s", m->dest);
		mode_t mode = st.st_mode & 07777;
		size_t n = strlen(m->data) + 16;
		char *data = malloc(n);
		if (!data)
			child_fail("out of memory");
		if (m->data[0])
			snprintf(data, n, "mode=%04o,%s", mode, m->data);
		else
			snprintf(data, n, "mode=%04o", mode);
		m->data = data;
	}
	if (fd < 0) {
		if (errno != ENOENT)
			child_fail("lookup mountpoint target %s", m->dest);
		int file = 0;
		if (strcmp(m->device, "bind") == 0) {
			struct stat st;
			if (m->srcfd >= 0)
				CHECK(fstat(m->srcfd, &st), "stat bind source %s", m->source);
			else
				CHECK(stat(m->source, &st), "stat bind source %s", m->source);
			file = !S_ISDIR(st.st_mode);
		}
		if (file) {
			char dir[PATH_MAX];
			const char *name;
			split_parent(m->dest, dir, sizeof(dir), &name);
			int dfd = mkdir_all_in_root(rootfd, dir, 0755);
			CHECK(dfd, "make mountpoint %s", m->dest);
			int f = openat(dfd, name, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0644);
			CHECK(f, "make mountpoint %s", m->dest);
			close(f);
			close(dfd);
			fd = open_in_root(rootfd, m->dest, O_PATH);
		} else {
			fd = mkdir_all_in_root(rootfd, m->dest, 0755);
		}
		CHECK(fd, "make mountpoint %s", m->dest);
	}
	/* The mountpoint must be inside the root and not the root itself,
	 * and (checkProcMount) not on or below /proc. */
	char link[PATH_MAX];
	ssize_t n = readlink(procfd(1, fd), link, sizeof(link) - 1);
	CHECK(n, "get mount destination real path of %s", m->dest);
	link[n] = 0;
	size_t rl = strlen(rootfs_path);
	if (strncmp(link, rootfs_path, rl) != 0 || (link[rl] != '/' && link[rl] != 0)) {
		errno = 0;
		child_fail("mountpoint %s is outside of rootfs %s", link, rootfs_path);
	}
	if (link[rl] == 0) {
		errno = 0;
		child_fail("mountpoint %s is on the top of rootfs %s", link, rootfs_path);
	}
	struct mnt resolved = *m;
	resolved.dest = link + rl;
	check_proc_mount(&resolved);
	return fd;
}

static void mount_to_rootfs(int rootfd, struct mnt *m)
{
	if (strcmp(m->device, "proc") == 0 || strcmp(m->device, "sysfs") == 0) {
		check_proc_mount(m);
		/* The destination must be an ordinary directory if it exists. */
		int dst = open_in_root(rootfd, m->dest, O_PATH | O_NOFOLLOW);
		if (dst >= 0) {
			struct stat st;
			CHECK(fstat(dst, &st), "stat %s", m->dest);
			if (!S_ISDIR(st.st_mode)) {
				errno = 0;
				child_fail("filesystem \"%s\" must be mounted on ordinary directory", m->device);
			}
		} else {
			dst = mkdir_all_in_root(rootfd, m->dest, 0755);
			CHECK(dst, "make mountpoint %s", m->dest);
		}
		mount_propagate(rootfd, m, &dst, 0);
		close(dst);
		return;
	}
	check_proc_mount(m);
	int dst = create_open_mountpoint(rootfd, m);
	if (strcmp(m->device, "tmpfs") == 0) {
		mount_propagate(rootfd, m, &dst, 0);
		close(dst);
		return;
	}
	if (strcmp(m->device, "bind") != 0) {
		errno = 0;
		child_fail("mount type %s is not supported by the fork server", m->device);
	}
	int remount = (m->flags & ~(MS_BIND | MS_REC | MS_REMOUNT)) != 0 || m->cleared != 0;
	mount_propagate(rootfd, m, &dst, remount);
	if (remount) {
		uint32_t flags = m->flags | MS_BIND | MS_REMOUNT;
		if (mount("", procfd(0, dst), "", flags, NULL) < 0) {
			/* Locked flags (a mount from a more privileged namespace):
			 * keep them, as runc's "remount with locked flags". */
			int mount_errno = errno;
			struct statfs st;
			CHECK(statfs(m->source, &st), "statfs %s", m->source);
			uint32_t src = statfs_to_mount_flags(&st);
			if (src & m->cleared & LOCK_FLAGS) {
				errno = mount_errno;
				child_fail("cannot clear locked flags on %s", m->dest);
			}
			if ((m->flags & ATIME_FLAGS) && (m->flags & ATIME_FLAGS) != (src & ATIME_FLAGS)) {
				errno = mount_errno;
				child_fail("cannot change locked atime flags on %s", m->dest);
			}
			flags |= src & LOCK_FLAGS;
			CHECK(mount("", procfd(0, dst), "", flags, NULL), "remount %s with locked flags re-applied", m->dest);
		}
	}
	close(dst);
}

/* prepare_root is runc's prepareRoot plus rootfsParentMountPropagation. */
static void prepare_root(const struct plan *pl)
{
	uint32_t flag = pl->rootprop ? pl->rootprop : (MS_SLAVE | MS_REC);
	CHECK(mount("", "/", "", flag, NULL), "make / %s", (flag & MS_SLAVE) ? "rslave" : "private");
	uint32_t pflag = (pl->rootprop & MS_SLAVE) ? MS_SLAVE : MS_PRIVATE;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s", pl->rootfs);
	for (;;) {
		if (mount("", path, "", pflag, NULL) == 0)
			break;
		if (errno != EINVAL || strcmp(path, "/") == 0)
			child_fail("remount-propagation of %s", path);
		char *slash = strrchr(path, '/');
		if (slash == path)
			path[1] = 0;
		else
			*slash = 0;
	}
	CHECK(mount(pl->rootfs, pl->rootfs, "bind", MS_BIND | MS_REC, NULL), "bind %s onto itself", pl->rootfs);
}

/* in_dir opens the directory of path inside the root, reusing *cache when
 * it is the same directory (most devices and links are in /dev). */
static int in_dir(int rootfd, const char *path, const char **name, char *cached, int *cache)
{
	char dir[PATH_MAX];
	split_parent(path, dir, sizeof(dir), name);
	if (*cache >= 0 && strcmp(dir, cached) == 0)
		return *cache;
	if (*cache >= 0)
		close(*cache);
	*cache = mkdir_all_in_root(rootfd, dir, 0755);
	CHECK(*cache, "mkdir parent of %s", path);
	snprintf(cached, PATH_MAX, "%s", dir);
	return *cache;
}

/* create_devices is createDevices in a user namespace: each node is
 * bind-mounted from the host (a user namespace cannot mknod). */
static void create_devices(int rootfd, const struct plan *pl, char *cached, int *cache)
{
	for (int i = 0; i < pl->ndevices; i++) {
		const char *path = pl->devices[i];
		if (strcmp(path, "/dev/ptmx") == 0)
			continue;
		const char *name;
		int dfd = in_dir(rootfd, path, &name, cached, cache);
		int f = openat(dfd, name, O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_RDONLY, 0);
		CHECK(f, "create device inode %s", path);
		CHECK(mount(path, procfd(0, f), "bind", MS_BIND, NULL), "bind device %s", path);
		close(f);
	}
}

static void symlink_in_root(int rootfd, const char *target, const char *link, char *cached, int *cache)
{
	const char *name;
	int dfd = in_dir(rootfd, link, &name, cached, cache);
	if (symlinkat(target, dfd, name) < 0 && errno != EEXIST)
		child_fail("symlink %s -> %s", link, target);
}

/* setup_dev is runc's doSetupDev: createDevices, setupPtmx and
 * setupDevSymlinks. */
static void setup_dev(int rootfd, const struct plan *pl)
{
	char cached[PATH_MAX];
	int cache = -1;
	create_devices(rootfd, pl, cached, &cache);
	const char *name;
	int dfd = in_dir(rootfd, "/dev/ptmx", &name, cached, &cache);
	if (unlinkat(dfd, "ptmx", 0) < 0 && errno != ENOENT)
		child_fail("remove /dev/ptmx");
	CHECK(symlinkat("pts/ptmx", dfd, "ptmx"), "symlink /dev/ptmx");
	symlink_in_root(rootfd, "/proc/self/fd", "/dev/fd", cached, &cache);
	symlink_in_root(rootfd, "/proc/self/fd/0", "/dev/stdin", cached, &cache);
	symlink_in_root(rootfd, "/proc/self/fd/1", "/dev/stdout", cached, &cache);
	symlink_in_root(rootfd, "/proc/self/fd/2", "/dev/stderr", cached, &cache);
	struct stat st;
	if (stat("/proc/kcore", &st) == 0)
		symlink_in_root(rootfd, "/proc/kcore", "/dev/core", cached, &cache);
	if (cache >= 0)
		close(cache);
}

/* pivot_to is runc's pivotRoot. */
static void pivot_to(int rootfd)
{
	int oldroot = open("/", O_DIRECTORY | O_RDONLY | O_PATH | O_CLOEXEC);
	CHECK(oldroot, "open /");
	CHECK(fchdir(rootfd), "chdir to the root");
	CHECK(syscall(SYS_pivot_root, ".", "."), "pivot_root");
	CHECK(fchdir(oldroot), "fchdir to the old root");
	CHECK(mount("", ".", "", MS_SLAVE | MS_REC, NULL), "make the old root rslave");
	CHECK(umount2(".", MNT_DETACH), "unmount the old root");
	CHECK(chdir("/"), "chdir /");
	close(oldroot);
}

static int is_dev_null(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && st->st_rdev == makedev(1, 3);
}

/* open_dev_null opens the container's /dev/null and checks that it is one
 * (runc's verifyDevNull). */
static int open_dev_null(int flags, const char *what)
{
	int fd = open("/dev/null", flags | O_CLOEXEC);
	CHECK(fd, "%s: open /dev/null", what);
	struct stat st;
	CHECK(fstat(fd, &st), "%s: stat /dev/null", what);
	if (!is_dev_null(&st)) {
		errno = 0;
		child_fail("%s: container's /dev/null is invalid", what);
	}
	return fd;
}

/* reopen_dev_null is runc's reOpenDevNull. */
static void reopen_dev_null(void)
{
	int fd = open_dev_null(O_RDWR, "can't reopen /dev/null");
	for (int i = 0; i < 3; i++) {
		struct stat s;
		CHECK(fstat(i, &s), "fstat fd %d", i);
		if (is_dev_null(&s))
			CHECK(dup3(fd, i, 0), "dup3 /dev/null to fd %d", i);
	}
	close(fd);
}

/* mkdir_all creates every missing component of an absolute path, after
 * the pivot (os.MkdirAll). */
static void mkdir_all(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			child_fail("mkdir %s", buf);
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		child_fail("mkdir %s", buf);
}

static void prepare_rootfs(struct plan *pl)
{
	rootfs_path = pl->rootfs;
	prepare_root(pl);
	int rootfd = open(pl->rootfs, O_DIRECTORY | O_CLOEXEC | O_PATH);
	CHECK(rootfd, "open rootfs handle");
	for (int i = 0; i < pl->nmounts; i++)
		mount_to_rootfs(rootfd, &pl->mounts[i]);
	if (pl->setupdev)
		setup_dev(rootfd, pl);
	CHECK(fchdir(rootfd), "chdir %s", pl->rootfs);
	pivot_to(rootfd);
	close(rootfd);
	if (pl->rootprop != 0 && (pl->rootprop & (MS_PRIVATE | MS_SLAVE)) == 0)
		CHECK(mount("", "/", "", pl->rootprop, NULL), "apply root propagation flags");
	if (pl->setupdev)
		reopen_dev_null();
	if (pl->cwd && pl->cwd[0])
		mkdir_all(pl->cwd, 0755);
}

/* finalize_rootfs is runc's finalizeRootfs. */
static void finalize_rootfs(const struct plan *pl)
{
	for (int i = 0; i < pl->nmounts; i++) {
		const struct mnt *m = &pl->mounts[i];
		if (!(m->flags & MS_RDONLY))
			continue;
		if (strcmp(m->device, "tmpfs") == 0 || is_dev_dest(m->dest)) {
			int tries = 0;
			for (;;) {
				if (mount("", m->dest, "", m->flags | MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) == 0)
					break;
				if (errno != EBUSY || ++tries == 5)
					child_fail("remount %s read-only", m->dest);
				usleep(100000);
			}
		}
	}
	if (pl->readonlyfs) {
		struct statfs st;
		CHECK(statfs("/", &st), "statfs /");
		uint32_t keep = statfs_to_mount_flags(&st) & (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOSYMFOLLOW);
		CHECK(mount("", "/", "", keep | MS_BIND | MS_REMOUNT | MS_RDONLY, NULL), "error setting rootfs as readonly");
	}
	umask(pl->umask);
}

/* readonly_path is runc's readonlyPath. */
static void readonly_path(const char *path)
{
	if (mount(path, path, "", MS_BIND | MS_REC, NULL) < 0) {
		if (errno == ENOENT)
			return;
		child_fail("can't make %s read-only", path);
	}
	struct statfs st;
	CHECK(statfs(path, &st), "statfs %s", path);
	unsigned long flags = st.f_flags & (MS_NOSUID | MS_NODEV | MS_NOEXEC);
	CHECK(mount(path, path, "", flags | MS_BIND | MS_REMOUNT | MS_RDONLY, NULL), "can't make %s read-only", path);
}

/* mask_paths is runc's maskPaths: /dev/null over files; a read-only tmpfs
 * over the first directory, and binds of that one over the others. */
static void mask_paths(const struct plan *pl)
{
	if (pl->nmaskpaths == 0)
		return;
	int devnull = open_dev_null(O_PATH, "can't mask paths");
	int shared = -1;
	for (int i = 0; i < pl->nmaskpaths; i++) {
		const char *path = pl->maskpaths[i];
		int seen = 0;
		for (int j = 0; j < i; j++)
			seen |= strcmp(pl->maskpaths[j], path) == 0;
		int dst = open(path, O_PATH | O_CLOEXEC);
		if (dst < 0) {
			if (errno == ENOENT)
				continue;
			child_fail("can't mask path %s", path);
		}
		if (seen) {
			close(dst);
			continue;
		}
		struct stat ds;
		CHECK(fstat(dst, &ds), "can't mask path %s", path);
		char target[64];
		snprintf(target, sizeof(target), "/proc/thread-self/fd/%d", dst);
		if (S_ISDIR(ds.st_mode)) {
			if (shared >= 0) {
				char src[64];
				snprintf(src, sizeof(src), "/proc/thread-self/fd/%d", shared);
				CHECK(mount(src, target, "", MS_BIND, NULL), "can't mask dir %s", path);
			} else {
				if (mount("tmpfs", path, "tmpfs", MS_RDONLY, "nr_blocks=1,nr_inodes=1") < 0)
					CHECK(mount("tmpfs", path, "tmpfs", MS_RDONLY, "nr_blocks=1,nr_inodes=2"), "can't mask dir %s", path);
				shared = open(path, O_PATH | O_CLOEXEC);
				CHECK(shared, "can't reopen shared directory mask %s", path);
			}
		} else {
			char src[64];
			snprintf(src, sizeof(src), "/proc/thread-self/fd/%d", devnull);
			CHECK(mount(src, target, "", MS_BIND, NULL), "can't mask path %s", path);
		}
		close(dst);
	}
	if (shared >= 0)
		close(shared);
	close(devnull);
}

/* ------------------------------------------------------------------ */
/* The rest of runc's init                                              */

/* join_session_keyring is the start of linuxStandardInit.Init. */
static void join_session_keyring(const struct plan *pl)
{
	long id = syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, pl->keyring);
	if (id < 0) {
		if (errno == ENOSYS)
			return;
		child_fail("unable to join session keyring");
	}
	char desc[512];
	long n = syscall(SYS_keyctl, KEYCTL_DESCRIBE, id, desc, sizeof(desc) - 1);
	CHECK(n, "describe session keyring");
	desc[n < (long)sizeof(desc) ? n : (long)sizeof(desc) - 1] = 0;
	/* "type;uid;gid;perm;description": the perm is the fourth field. */
	char *f = desc;
	for (int i = 0; i < 3 && f; i++) {
		f = strchr(f, ';');
		if (f)
			f++;
	}
	if (!f) {
		errno = 0;
		child_fail("Destination buffer for key description is too small");
	}
	unsigned long perm = strtoul(f, NULL, 16);
	perm = (perm & 0xffffffffUL) | pl->keyperm;
	CHECK(syscall(SYS_keyctl, KEYCTL_SETPERM, id, (unsigned long)(uint32_t)perm), "unable to mod keyring permissions");
}

/* loopback_up is runc's loopback network strategy (netlink LinkSetUp). */
static void loopback_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(s, "socket for lo");
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	CHECK(ioctl(s, SIOCGIFFLAGS, &ifr), "get flags of lo");
	ifr.ifr_flags |= IFF_UP;
	CHECK(ioctl(s, SIOCSIFFLAGS, &ifr), "set lo up");
	close(s);
}

/* fix_stdio_permissions is runc's fixStdioPermissions. */
static void fix_stdio_permissions(uid_t uid)
{
	for (int fd = 0; fd < 3; fd++) {
		struct stat st;
		CHECK(fstat(fd, &st), "fstat stdio fd %d", fd);
		if (st.st_uid == uid || is_dev_null(&st))
			continue;
		if (fchown(fd, uid, -1) < 0) {
			if (errno == EPERM || errno == EROFS)
				continue;
			child_fail("chown stdio fd %d", fd);
		}
	}
}

static int read_file(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = read(fd, buf, n - 1);
	close(fd);
	if (r < 0)
		return -1;
	buf[r] = 0;
	return 0;
}

/* The host's last capability and the zygote's own setgroups state, read
 * once per zygote (zygote_loop) rather than in every child: neither can
 * change while the zygote lives (cap_last_cap is the running kernel's; a
 * user namespace's setgroups can go from "allow" to "deny" only before its
 * gid map is written, and the zygote's was written before it started).
 * What the child does with them is what runc's init does with the files. */
static int zygote_last_cap = -1;
static char zygote_setgroups[16];
static int zygote_setgroups_errno;

static int last_cap(void)
{
	char buf[32];
	if (read_file("/proc/sys/kernel/cap_last_cap", buf, sizeof(buf)) < 0)
		return CAP_LAST_CAP;
	return atoi(buf);
}

/* child_setgroups is what the child's /proc/self/setgroups holds: a new
 * user namespace starts with its parent's state ("deny" stays "deny"),
 * and the zygote wrote "deny" when the request said so. */
static int child_setgroups(const struct scz_request *req, char *sg, size_t n)
{
	if (zygote_setgroups_errno) {
		errno = zygote_setgroups_errno;
		return -1;
	}
	if ((req->clone_flags & CLONE_NEWUSER) && req->setgroups_deny)
		snprintf(sg, n, "deny\n");
	else
		snprintf(sg, n, "%s", zygote_setgroups);
	return 0;
}

/* finalize_namespace is runc's finalizeNamespace with setupUser, for a
 * process that gets no capabilities at all. */
static void finalize_namespace(const struct plan *pl, const struct scz_request *req)
{
	int nextra = (int)req->nextra;
	CHECK(syscall(SYS_close_range, 3 + nextra, ~0U, CLOSE_RANGE_CLOEXEC), "error closing exec fds");
	int chdir_later = 0;
	if (pl->cwd && pl->cwd[0]) {
		if (chdir(pl->cwd) < 0) {
			if (errno != EACCES && errno != EPERM)
				child_fail("chdir to cwd (\"%s\") set in config.json failed", pl->cwd);
			chdir_later = 1;
		}
	}
	int last = zygote_last_cap;
	for (int c = 0; c <= last; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			child_fail("unable to apply bounding set");
	CHECK(prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "unable to set keep caps");
	fix_stdio_permissions(pl->uid);
	char sg[16] = "";
	if (child_setgroups(req, sg, sizeof(sg)) < 0 && errno != ENOENT)
		child_fail("read /proc/self/setgroups");
	if (pl->setgroups && strncmp(sg, "deny", 4) != 0)
		CHECK(setgroups(0, NULL), "setgroups");
	if (setgid(pl->gid) < 0) {
		if (errno == EINVAL)
			child_fail("cannot setgid to unmapped gid %u in user namespace", pl->gid);
		child_fail("setgid");
	}
	if (setuid(pl->uid) < 0) {
		if (errno == EINVAL)
			child_fail("cannot setuid to unmapped uid %u in user namespace", pl->uid);
		child_fail("setuid");
	}
	if (chdir_later)
		CHECK(chdir(pl->cwd), "chdir to cwd (\"%s\") set in config.json failed", pl->cwd);
	char wd[PATH_MAX];
	if (!getcwd(wd, sizeof(wd))) {
		if (errno == ENOENT) {
			errno = 0;
			child_fail("current working directory is outside of container mount namespace root -- possible container breakout detected");
		}
		child_fail("failed to verify if current working directory is safe");
	}
	if (wd[0] != '/') {
		errno = 0;
		child_fail("current working directory is not absolute -- possible container breakout detected: cwd is \"%s\"", wd);
	}
	CHECK(prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0), "unable to clear keep caps");
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	CHECK(syscall(SYS_capset, &hdr, data), "can't apply capabilities");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		child_fail("can't reset ambient capabilities");
}

/* executable is Go's exec.findExecutable: a file, not a directory, that
 * this process may execute. */
static int executable(const char *file)
{
	struct stat st;
	if (stat(file, &st) < 0)
		return -1;
	if (S_ISDIR(st.st_mode)) {
		errno = EISDIR;
		return -1;
	}
	if (faccessat(AT_FDCWD, file, X_OK, AT_EACCESS) < 0)
		return -1;
	return 0;
}

/* look_path is exec.LookPath with the container's PATH; it returns a
 * malloc'd path or fails the child as runc's create does. */
static char *look_path(const struct plan *pl)
{
	const char *name = pl->argv[0];
	if (strchr(name, '/')) {
		if (executable(name) < 0)
			child_fail("exec: \"%s\"", name);
		return strdup(name);
	}
	const char *path = pl->path ? pl->path : "";
	const char *p = path;
	for (;;) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char dir[PATH_MAX];
		if (n == 0)
			snprintf(dir, sizeof(dir), ".");
		else
			snprintf(dir, sizeof(dir), "%.*s", (int)n, p);
		char full[2 * PATH_MAX + 2];
		int fl = snprintf(full, sizeof(full), "%s/%s", dir, name);
		if (fl > 0 && fl < PATH_MAX && executable(full) == 0) {
			if (full[0] != '/') {
				errno = 0;
				child_fail("exec: \"%s\": cannot run executable found relative to current directory", name);
			}
			return strdup(full);
		}
		if (!end)
			break;
		p = end + 1;
	}
	errno = 0;
	child_fail("exec: \"%s\": executable file not found in $PATH", name);
}

static void load_seccomp(const struct plan *pl)
{
	if (!pl->bpf)
		return;
	struct sock_fprog prog = {.len = (unsigned short)pl->bpf_len, .filter = (struct sock_filter *)pl->bpf};
	if (pl->seccomp_flags == 0)
		CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0), "error loading seccomp filter into kernel");
	else
		CHECK(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, pl->seccomp_flags, &prog), "error loading seccomp filter into kernel");
}

/* What the program's process (prog_main) execs, with the signal mask to
 * restore and the first fd that is not the program's. */
struct prog_exec {
	const char *name;
	char **argv, **envp;
	unsigned first;
	uint64_t mask;
};

/* prog_main runs in the program's process, on its own stack and in the
 * init's memory until it execs (CLONE_VM|CLONE_VFORK): system calls and
 * the error message only. */
static int prog_main(void *arg)
{
	struct prog_exec *pe = arg;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &pe->mask, NULL, sizeof(uint64_t));
	/* CVE-2024-21626: nothing but the program's own fds may survive exec. */
	syscall(SYS_close_range, pe->first, ~0U, 0);
	execve(pe->name, pe->argv, pe->envp);
	int e = errno;
	char msg[PATH_MAX + 64];
	const char *s = strerror(e);
	int n = snprintf(msg, sizeof(msg), "exec %s: %c%s\n", pe->name, s[0] >= 'A' && s[0] <= 'Z' ? s[0] - 'A' + 'a' : s[0], s + 1);
	if (n > 0)
		(void)!write(2, msg, n);
	_exit(255);
}

/* child_main sets up the sandbox, clones the program (which execs) and
 * stays its init. fds: the request's fds (see struct scz_request). It
 * never returns. */
static void child_main(const struct scz_request *req, int *fds, int nfds, int mapsync)
{
	/* Our own fds move out of the way of the program's (0 to 2+nextra),
	 * close-on-exec: all copies first, then the originals are closed. */
	int low = 3 + (int)req->nextra;
	/* Usually none is in the way (the zygote holds 0 to 3, so what it
	 * received is above; every one is close-on-exec already: received
	 * with MSG_CMSG_CLOEXEC, mapsync made O_CLOEXEC), and the 2 system
	 * calls a fd that moving costs are skipped (issue #18). */
	int in_way = mapsync < low;
	for (int i = 0; i < nfds; i++)
		in_way |= fds[i] < low;
	if (in_way) {
		int moved[MAX_FDS + 1];
		for (int i = 0; i < nfds; i++)
			if ((moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, low)) < 0)
				_exit(1);
		if ((moved[nfds] = fcntl(mapsync, F_DUPFD_CLOEXEC, low)) < 0)
			_exit(1);
		for (int i = 0; i < nfds; i++) {
			close(fds[i]);
			fds[i] = moved[i];
		}
		close(mapsync);
		mapsync = moved[nfds];
	}
	child_sync = fds[1];
	/* The program's stdio and extra files at 0, 1, 2, 3... */
	for (int i = 0; i < 3 + (int)req->nextra; i++)
		CHECK(dup3(fds[2 + i], i, 0), "dup3 fd %d", i);

	/* Wait until the zygote has written the id maps (stage-1's SYNC_USERMAP). */
	char c;
	if (read(mapsync, &c, 1) != 1)
		_exit(1);
	close(mapsync);
	if (req->clone_flags & CLONE_NEWUSER)
		CHECK(setresuid(0, 0, 0), "setresuid to root of the user namespace");
	CHECK(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)");

	struct stat pst;
	CHECK(fstat(fds[0], &pst), "stat the plan");
	unsigned char *buf = malloc(pst.st_size ? pst.st_size : 1);
	if (!buf)
		child_fail("out of memory");
	ssize_t got = pread(fds[0], buf, pst.st_size, 0);
	if (got != pst.st_size)
		child_fail("read the plan");
	close(fds[0]);
	child_sources = fds + 2 + 3 + req->nextra;
	child_nsources = req->nsources;
	struct plan pl;
	parse_plan(&pl, buf, pst.st_size);
	if (pl.argc == 0 || !pl.rootfs) {
		errno = 0;
		child_fail("plan: no program or no root");
	}

	/* Join the run's cgroup v1 hierarchies (clone3 put it in the v2 one).
	 * A thread that moves itself ("0" in "tasks") does not take the
	 * global cgroup_threadgroup_rwsem, whose writers wait for an RCU
	 * grace period (5-15 ms here): the zygote opened the files as root. */
	int tasks0 = 2 + 3 + req->nextra + req->nsources;
	for (uint32_t i = 0; i < req->ntasks; i++) {
		CHECK(write(fds[tasks0 + i], "0", 1), "join the run's cgroup");
		close(fds[tasks0 + i]);
	}
	if (pl.cgroupns)
		CHECK(unshare(CLONE_NEWCGROUP), "unshare the cgroup namespace");

	/* nsexec stage-2. */
	CHECK(setsid(), "setsid");
	CHECK(setuid(0), "setuid");
	CHECK(setgid(0), "setgid");
	if (pl.setgroups0)
		CHECK(setgroups(0, NULL), "setgroups");

	/* linuxStandardInit.Init */
	if (pl.keyring)
		join_session_keyring(&pl);
	if (pl.loopback)
		loopback_up();
	prepare_rootfs(&pl);
	finalize_rootfs(&pl);
	if (pl.hostname && pl.hostname[0])
		CHECK(sethostname(pl.hostname, strlen(pl.hostname)), "sethostname");
	if (pl.domainname && pl.domainname[0])
		CHECK(setdomainname(pl.domainname, strlen(pl.domainname)), "setdomainname");
	for (int i = 0; i < pl.nropaths; i++)
		readonly_path(pl.ropaths[i]);
	mask_paths(&pl);
	if (pl.nnp)
		CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(SET_NO_NEW_PRIVS)");
	finalize_namespace(&pl, req);
	char *name = look_path(&pl);
	load_seccomp(&pl);

	/* Ready; wait for the go-ahead (runc's exec fifo). */
	char ready = SCZ_READY;
	if (send(child_sync, &ready, 1, MSG_NOSIGNAL) != 1)
		_exit(1);
	if (recv(child_sync, &c, 1, 0) != 1 || c != SCZ_GO)
		_exit(1);
	/* This process stays PID 1 of the run, as its init (runinit.c):
	 * the program is its child, an ordinary process to which every
	 * signal it sends itself is delivered (issue #37). The init keeps
	 * only the sync socket, to hand sandcell the program's wait status.
	 * The program is cloned as posix_spawn does (CLONE_VM|CLONE_VFORK,
	 * on a stack of its own): no copy of this process's memory is made
	 * for a child that execs at once, and the init goes on only once it
	 * has. Every signal stays blocked in the init; the program gets the
	 * mask back. */
	struct prog_exec pe = {.name = name, .argv = pl.argv, .envp = pl.envp, .first = 3 + req->nextra};
	uint64_t all = ~(uint64_t)0;
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &pe.mask, sizeof(uint64_t)) < 0)
		_exit(255);
	static char prog_stack[64 << 10] __attribute__((aligned(16)));
	int prog = clone(prog_main, prog_stack + sizeof(prog_stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &pe);
	if (prog < 0) {
		char msg[128];
		int n = snprintf(msg, sizeof(msg), "sandcell: start the program under the run's init: clone: %s\n", strerror(errno));
		if (n > 0)
			(void)!write(2, msg, n);
		_exit(255);
	}
	sc_init_run(prog, child_sync);
}

/* ------------------------------------------------------------------ */
/* The zygote                                                           */

/* write_proc writes data to a file of the child's /proc/PID directory
 * (procdir: opened once per child, so each file is one lookup, not a walk
 * through /proc and the pid). */
/* Every CPU, for the child's affinity (runc's tryResetCPUAffinity): filled
 * once in zygote_loop and only read after, so the zygote's writes after a
 * clone do not copy its pages (each write to a page shared with a child
 * not yet exec'd is a copy-on-write fault). */
static unsigned char all_cpus[64 * 1024 / 8];

static int write_proc(int procdir, const char *file, const char *data)
{
	int fd = openat(procdir, file, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, data, strlen(data));
	int e = errno;
	close(fd);
	errno = e;
	return n == (ssize_t)strlen(data) ? 0 : -1;
}

/* send_fd sends buf with fd (if >= 0) as SCM_RIGHTS on sock, retrying on
 * EINTR: sendmsg's result. */
static ssize_t send_fd(int sock, const void *buf, size_t len, int fd)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd >= 0) {
		memset(cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n >= 0 || errno != EINTR)
			return n;
	}
}

static void reply(int status, pid_t pid, int pidfd, const char *fmt, ...)
{
	struct scz_reply r;
	memset(&r, 0, sizeof(r));
	r.status = status;
	r.pid = pid;
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r.msg, sizeof(r.msg), fmt, ap);
		va_end(ap);
	}
	if (send_fd(zygote_sock, &r, sizeof(r), pidfd) < 0)
		_exit(0); /* sandcell is gone */
}

static int keep(int pidfd);

static void serve_one(const struct scz_request *req, int *fds, int nfds)
{
	int want = 5 + (int)req->nextra + (int)req->nsources + (int)req->ntasks + (req->cgroup2 ? 1 : 0);
	if (req->magic != SCZ_MAGIC || req->version != SCZ_VERSION || req->nextra > SCZ_MAX_EXTRA || req->nsources > SCZ_MAX_SOURCES ||
	    req->ntasks > SCZ_MAX_TASKS || nfds != want ||
	    (req->clone_flags & ~(uint64_t)(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)) ||
	    memchr(req->uid_map, 0, SCZ_MAP_LEN) == NULL || memchr(req->gid_map, 0, SCZ_MAP_LEN) == NULL) {
		reply(EINVAL, 0, -1, "malformed request (%d fds, want %d)", nfds, want);
		return;
	}
	int mapsync[2];
	if (pipe2(mapsync, O_CLOEXEC) < 0) {
		reply(errno, 0, -1, "pipe: %s", strerror(errno));
		return;
	}
	int pidfd = -1;
	struct clone_args ca;
	memset(&ca, 0, sizeof(ca));
	ca.flags = req->clone_flags | CLONE_PARENT | CLONE_PIDFD;
	ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
	/* With CLONE_PARENT the child inherits the zygote's own exit signal
	 * (SIGCHLD, as sandcell started it); clone3 refuses one given here. */
	ca.exit_signal = 0;
	if (req->cgroup2) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)fds[nfds - 1];
	}
	long pid = syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid == 0) {
		close(zygote_sock);
		zygote_sock = -1;
		if (keeper_sock >= 0)
			close(keeper_sock);
		close(mapsync[1]);
		child_main(req, fds, nfds, mapsync[0]);
	}
	int e = errno;
	close(mapsync[0]);
	if (pid < 0) {
		close(mapsync[1]);
		reply(e, 0, -1, "clone3: %s", strerror(e));
		return;
	}
	/* From outside, as runc's stage-0 and parent do: the id maps,
	 * oom_score_adj (a user namespace cannot lower it) and the CPU
	 * affinity (tryResetCPUAffinity). sandcell sets the rlimits once the
	 * child is ready, as runc's parent does at procReady. */
	const char *fail = NULL;
	char procpath[32];
	snprintf(procpath, sizeof(procpath), "/proc/%ld", pid);
	int procdir = open(procpath, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (procdir < 0)
		fail = "open /proc of the child";
	if (!fail && (req->clone_flags & CLONE_NEWUSER)) {
		if (req->setgroups_deny && write_proc(procdir, "setgroups", "deny") < 0)
			fail = "write setgroups";
		else if (write_proc(procdir, "uid_map", req->uid_map) < 0)
			fail = "write uid_map";
		else if (write_proc(procdir, "gid_map", req->gid_map) < 0)
			fail = "write gid_map";
	}
	if (!fail && req->oom_score_adj_set) {
		char v[16];
		snprintf(v, sizeof(v), "%d", req->oom_score_adj);
		if (write_proc(procdir, "oom_score_adj", v) < 0)
			fail = "write oom_score_adj";
	}
	if (procdir >= 0) {
		int e2 = errno;
		close(procdir);
		errno = e2;
	}
	if (!fail) {
		(void)syscall(SYS_sched_setaffinity, pid, sizeof(all_cpus), all_cpus);
	}
	if (fail) {
		e = errno;
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
		close(mapsync[1]);
		reply(e ? e : EIO, pid, pidfd, "%s: %s", fail, strerror(e));
		close(pidfd);
		return;
	}
	/* Kept before it may go on: a child whose zygote dies before this
	 * reads the end of mapsync and exits. */
	if (keep(pidfd) < 0) {
		e = errno;
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
		close(mapsync[1]);
		e = e ? e : EIO;
		reply(e, pid, pidfd, "hand the run to the keeper: %s", strerror(e));
		close(pidfd);
		_exit(1); /* without its keeper: sandcell starts a new zygote */
	}
	(void)!write(mapsync[1], "1", 1);
	close(mapsync[1]);
	reply(0, pid, pidfd, NULL);
	close(pidfd);
}

/* close_fds closes a request's fds: with one close_range when they are
 * consecutive numbers (as the kernel hands them out: the lowest free ones,
 * and the zygote holds no other fd above its socket between requests),
 * else one by one. */
static void close_fds(const int *fds, int nfds)
{
	if (nfds == 0)
		return;
	int lo = fds[0], hi = fds[0];
	for (int i = 1; i < nfds; i++) {
		if (fds[i] < lo)
			lo = fds[i];
		if (fds[i] > hi)
			hi = fds[i];
	}
	if (hi - lo + 1 == nfds && lo > zygote_sock && syscall(SYS_close_range, lo, hi, 0) == 0)
		return;
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
}

/* ------------------------------------------------------------------ */
/* The zygote's own capabilities                                         */

/* What this defends against: a compromised or misled zygote (its one peer
 * is sandcell, see "If it were compromised" in SECURITY.md) used to hold
 * every capability of host root: loading a kernel module, kexec, raw I/O,
 * ptrace of any host process, mounting over the host. It needs few: the
 * uid and gid maps it writes from outside (CAP_SETUID, CAP_SETGID in the
 * parent user namespace, user_namespaces(7)) and the run's oom_score_adj
 * (CAP_SYS_RESOURCE: written as runc's parent writes it, with the
 * capability, so the run's oom_score_adj_min stays as under libcontainer);
 * in a rootless server's user namespace, where the run maps its root to
 * that namespace's id 0, also CAP_SETFCAP (the kernel's verify_root_map
 * wants it for a map of id 0, since Linux 5.12), a capability over that
 * namespace only.
 * Everything else it does needs none: a clone3 with CLONE_NEWUSER gives
 * the child every capability (and a full bounding set) in its new user
 * namespace, whose owner the zygote is; the other namespaces are owned by
 * it; CLONE_INTO_CGROUP and the pidfd signals rest on file ownership and
 * on that ownership of the run's user namespace. The bounding set goes too
 * (a zygote never execs, and no_new_privs already stops a gain by exec),
 * then the permitted, effective, inheritable and ambient sets. Without
 * CAP_SETPCAP (sandcell started with a reduced set) the bounding set is
 * left as it is; the other sets always shrink. keep is a mask of CAP_*
 * bits; -1 if the sets could not be cut. */
#define CAPBIT(c) (1ULL << (c))
#define ZYGOTE_CAPS (CAPBIT(CAP_SETUID) | CAPBIT(CAP_SETGID) | CAPBIT(CAP_SYS_RESOURCE))

/* in_initial_userns says whether this process's user namespace is the
 * host's (its uid_map maps every id to itself). */
static int in_initial_userns(void)
{
	char buf[64];
	unsigned long inner, outer, count;
	if (read_file("/proc/self/uid_map", buf, sizeof(buf)) < 0)
		return 1;
	return sscanf(buf, "%lu %lu %lu", &inner, &outer, &count) == 3 && inner == 0 && outer == 0 && count == 4294967295UL;
}

static int drop_caps(uint64_t keep, int last)
{
	for (int c = 0; c <= last && c < 64; c++) {
		if ((keep & CAPBIT(c)) || prctl(PR_CAPBSET_READ, c, 0, 0, 0) != 1)
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EPERM)
				break; /* no CAP_SETPCAP: the bounding set stays */
			return -1;
		}
	}
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return -1;
	for (int i = 0; i < 2; i++) {
		uint32_t k = (uint32_t)(keep >> (32 * i));
		d[i].effective &= k;
		d[i].permitted &= k;
		d[i].inheritable &= k;
	}
	return (int)syscall(SYS_capset, &h, d);
}

/* ------------------------------------------------------------------ */
/* The keeper: runs end with sandcell                                   */

/* What this defends against: a sandbox outliving the sandcell that started
 * it. A run's processes are sandcell's children (CLONE_PARENT), so a server
 * killed with -9 (the OOM killer, a client's or a CI job's SIGKILL, a
 * crash) used to leave them running, reparented to init, with nobody left
 * to enforce their wall-clock limit: a program that sleeps, or a pooled
 * interpreter waiting for its code, lived until the next sandcell start's
 * Recover. The program cannot carry a parent-death signal of its own:
 * runc's init sets none and a program can read it (PR_GET_PDEATHSIG, which
 * TestForkServerEquivalence compares), and the zygote cannot hold the runs'
 * pidfds itself: every child gets a copy of its fd table, and one sized for
 * many pidfds shows in the program's /proc/self/status (FDSize).
 *
 * So the zygote forks a keeper when it starts: a process of its own
 * session (a kill of sandcell's process group does not take it) that holds
 * a pidfd of sandcell and one of every run the zygote started, each sent
 * before the run may proceed (a zygote killed before that leaves a child
 * that exits at its map sync). When sandcell's pidfd reports its exit, the
 * keeper SIGKILLs every run not yet ended (its pid 1: the kernel then kills
 * the rest of its pid namespace) and exits. A pidfd names one process for
 * good: a run that ended is never confused with a later process that got
 * its pid. The keeper outlives a zygote that dies while sandcell lives (its
 * runs are sandcell's and go on) until its runs have ended. Without
 * pidfd_open (a kernel before 5.3, a seccomp policy around sandcell) there
 * is no keeper and runs wait for the next start's Recover, as before. */
/* The keeper's runs: their pidfds, and the poll set (sandcell, the zygote's
 * socket, then one entry per run), grown together so that polling never
 * needs memory that a run's arrival did not get. */
struct kept {
	int *live;
	struct pollfd *p;
	int nlive, cap;
};

/* keeper_take receives the pidfds the zygote sent into k; flags
 * MSG_DONTWAIT drains without blocking. Returns 0 when the zygote's end is
 * closed, -1 when nothing (more) is there or on an error, 1 after a
 * message. */
static int keeper_take(int sock, struct kept *k, int flags)
{
	char b;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = &b, .iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags);
	if (n == 0)
		return 0;
	if (n < 0)
		return errno == EINTR ? 1 : -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
			continue;
		int fd;
		memcpy(&fd, CMSG_DATA(cm), sizeof(int));
		if (k->nlive == k->cap) {
			int c = k->cap * 2;
			int *l = realloc(k->live, (size_t)c * sizeof(int));
			if (l)
				k->live = l;
			struct pollfd *p = l ? realloc(k->p, (size_t)(c + 2) * sizeof(*p)) : NULL;
			if (p)
				k->p = p;
			if (!p) {
				/* Cannot keep it: the run is ended now rather than
				 * left to outlive sandcell. */
				syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
				close(fd);
				continue;
			}
			k->cap = c;
		}
		k->live[k->nlive++] = fd;
	}
	return 1;
}

/* keeper_seccomp confines the keeper to the calls of its loop: poll,
 * receiving pidfds, closing them, SIGKILL through them, malloc's memory
 * calls, usleep and exit. Every other call fails with EPERM (a call
 * missing here costs a failed realloc, which kills the run it was for,
 * never a kill of the keeper); another architecture's calling convention
 * kills it. What it defends against: the keeper is a process of host root
 * that lives as long as sandcell, holding a pidfd of every run; should a
 * bug in it (its input is the zygote's, itself sandcell's) ever be
 * steered, it can do nothing but what it does. Without seccomp in the
 * kernel (EINVAL) it goes on without; 0 or -1. */
static int keeper_seccomp(void)
{
#ifndef SCZ_AUDIT_ARCH
	return 0;
#else
	static const uint32_t allow[] = {
#ifdef __NR_poll
		__NR_poll,
#endif
		__NR_ppoll, __NR_recvmsg, __NR_close, __NR_pidfd_send_signal, __NR_brk, __NR_mmap, __NR_munmap, __NR_mremap,
		__NR_madvise, __NR_clock_nanosleep, __NR_nanosleep, __NR_getrandom, __NR_exit, __NR_exit_group,
		__NR_rt_sigreturn, __NR_restart_syscall,
	};
	enum { N = sizeof(allow) / sizeof(allow[0]) };
	struct sock_filter f[4 + N + 2];
	f[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	f[1] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SCZ_AUDIT_ARCH, 1, 0);
	f[2] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	f[3] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	/* Instruction 4+i jumps to the last one (ALLOW) when it matches. */
	for (int i = 0; i < N; i++)
		f[4 + i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, allow[i], (unsigned char)(N - i), 0);
	f[4 + N] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
	f[5 + N] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog prog = {.len = (unsigned short)(sizeof(f) / sizeof(f[0])), .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
		return errno == EINVAL ? 0 : -1;
	return 0;
#endif
}

static void keeper_loop(int sock, int sandcell) __attribute__((noreturn));
static void keeper_loop(int sock, int sandcell)
{
	prctl(PR_SET_NAME, (unsigned long)"sandcell-keeper", 0, 0, 0);
	setsid();
	/* Nothing of sandcell's stdio: a client waiting for the end of the
	 * server's stderr must not wait for the keeper. */
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		close(null);
	}
	/* One fd per live run: as many as the hard limit allows. */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	/* No capability at all: a SIGKILL of a run needs none, the keeper
	 * being the owner of the run's user namespace (the zygote's euid
	 * made it), which gives it every capability there
	 * (user_namespaces(7)). See drop_caps for what this defends
	 * against. */
	if (drop_caps(0, last_cap()) < 0)
		_exit(1); /* the zygote's hand-overs fail: sandcell starts a new one */
	struct kept k = {.live = malloc(64 * sizeof(int)), .p = malloc(66 * sizeof(struct pollfd)), .cap = 64};
	if (!k.live || !k.p || keeper_seccomp() < 0)
		_exit(1); /* the zygote's hand-overs fail: sandcell starts a new one */
	int zygote_open = 1;
	for (;;) {
		if (!zygote_open && k.nlive == 0)
			_exit(0); /* the zygote is gone and so are its runs */
		struct pollfd *p = k.p;
		p[0] = (struct pollfd){.fd = sandcell, .events = POLLIN};
		p[1] = (struct pollfd){.fd = zygote_open ? sock : -1, .events = POLLIN};
		for (int i = 0; i < k.nlive; i++)
			p[2 + i] = (struct pollfd){.fd = k.live[i], .events = POLLIN};
		if (poll(p, 2 + k.nlive, -1) < 0) {
			/* EINTR, or the kernel short of memory: look again (the
			 * runs of a sandcell that lives are never ended here). */
			if (errno != EINTR)
				usleep(10000);
			continue;
		}
		if (p[0].revents)
			break;
		/* Runs that ended (backwards: a removal moves the last one in,
		 * which was looked at already). */
		for (int i = k.nlive - 1; i >= 0; i--) {
			if (p[2 + i].revents) {
				close(k.live[i]);
				k.live[i] = k.live[--k.nlive];
			}
		}
		/* The zygote's end closed, or an error that would repeat (poll
		 * would report it again at once): no more runs come. */
		if (zygote_open && p[1].revents && keeper_take(sock, &k, 0) <= 0) {
			zygote_open = 0;
			close(sock);
		}
	}
	/* sandcell is gone: every run the zygote sent, those still in the
	 * socket included, ends now. */
	while (zygote_open && keeper_take(sock, &k, MSG_DONTWAIT) > 0)
		;
	for (int i = 0; i < k.nlive; i++)
		syscall(SYS_pidfd_send_signal, k.live[i], SIGKILL, NULL, 0);
	_exit(0);
}

/* start_keeper forks the keeper (see above); without pidfd_open or on any
 * failure there is none (keeper_sock stays -1). */
static void start_keeper(void)
{
	pid_t ppid = getppid();
	int sandcell = (int)syscall(SYS_pidfd_open, ppid, 0);
	if (sandcell < 0)
		return;
	if (getppid() != ppid)
		_exit(0); /* sandcell died before we looked: no run yet */
	int ks[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ks) < 0) {
		close(sandcell);
		return;
	}
	pid_t k = fork();
	if (k == 0) {
		close(zygote_sock);
		close(ks[0]);
		keeper_loop(ks[1], sandcell);
	}
	close(ks[1]);
	close(sandcell);
	if (k < 0) {
		close(ks[0]);
		return;
	}
	keeper_sock = ks[0];
}

/* keep sends a run's pidfd to the keeper; -1 if it could not. */
static int keep(int pidfd)
{
	if (keeper_sock < 0)
		return 0;
	return send_fd(keeper_sock, "k", 1, pidfd) == 1 ? 0 : -1;
}

static void zygote_loop(int sock)
{
	zygote_sock = sock;
	/* Gone with sandcell: the socket's end also ends the loop. Its runs
	 * end with it through the keeper. */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	start_keeper();
	prctl(PR_SET_NAME, (unsigned long)"sandcell-zygote", 0, 0, 0);
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	zygote_last_cap = last_cap();
	if (drop_caps(ZYGOTE_CAPS | (in_initial_userns() ? 0 : CAPBIT(CAP_SETFCAP)), zygote_last_cap) < 0)
		_exit(1); /* sandcell logs the zygote's end and starts no run on it */
	memset(all_cpus, 0xff, sizeof(all_cpus));
	/* malloc's arena is set up here, once, not in every child. */
	void *volatile warm = malloc(1);
	free(warm);
	if (read_file("/proc/self/setgroups", zygote_setgroups, sizeof(zygote_setgroups)) < 0)
		zygote_setgroups_errno = errno ? errno : EIO;
	for (;;) {
		struct scz_request req;
		char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
		struct iovec iov = {.iov_base = &req, .iov_len = sizeof(req)};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
		ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (n == 0)
			_exit(0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		int fds[MAX_FDS];
		int nfds = 0;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			int k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (int i = 0; i < k && nfds < MAX_FDS; i++)
				memcpy(&fds[nfds++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
		}
		if (n != sizeof(req) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
			reply(EINVAL, 0, -1, "short or truncated request");
		else
			serve_one(&req, fds, nfds);
		close_fds(fds, nfds);
	}
}

__attribute__((constructor)) static void scz_main(void)
{
	const char *v = getenv(SCZ_ENV);
	if (!v)
		return;
	char *end;
	long fd = strtol(v, &end, 10);
	if (*end || fd < 3 || fd > 1 << 20)
		_exit(2);
	zygote_loop((int)fd);
}
