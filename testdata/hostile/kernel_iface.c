/* Kernel interfaces with a long record of privilege escalations, cut off by
 * the seccomp filter: keyrings (CVE-2016-0728), bpf (CVE-2021-3490 and
 * many verifier bugs), perf_event_open (CVE-2013-2094), userfaultfd (the
 * usual race-widener of exploits), io_uring (CVE-2023-2598, CVE-2022-29582;
 * Google turned it off in ChromeOS, Android and its servers). Arguments are
 * harmless even without the filter (read-only queries, bad fds). */
#include "probe.h"

int main(void) {
	unsigned char buf[128];
	memset(buf, 0, sizeof buf);
	PROBE("keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0));
	PROBE("add_key", syscall(SYS_add_key, "sandcell-no-such-type", "probe", "x", 1, -2));
	PROBE("request_key", syscall(SYS_request_key, "user", "sandcell-probe-absent", NULL, 0));
	PROBE("bpf_map_create", syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, buf, sizeof buf));
	PROBE("bpf_prog_load", syscall(SYS_bpf, 5 /* BPF_PROG_LOAD */, buf, sizeof buf));
	PROBE("perf_event_open", syscall(SYS_perf_event_open, buf, 0, -1, -1, 0));
	PROBE("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */));
	PROBE("io_uring_setup", syscall(SYS_io_uring_setup, 1, buf));
	PROBE("io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
	PROBE("io_uring_register", syscall(SYS_io_uring_register, -1, 0, NULL, 0));
	PROBE("open_userfaultfd_dev", open("/dev/userfaultfd", O_RDWR));
	PROBE("personality_read_implies_exec", syscall(SYS_personality, 0x0400000 /* READ_IMPLIES_EXEC */));
	PROBE("name_to_handle_at", syscall(SYS_name_to_handle_at, AT_FDCWD, "/", buf, buf + 64, 0));
	PROBE("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, buf, O_RDONLY));
	PROBE("fanotify_init", syscall(SYS_fanotify_init, 0, O_RDONLY));
	say("done\n");
	return 0;
}
