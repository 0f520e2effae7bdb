/*
 * The wire format between sandcell (package oci, Go) and its fork server
 * (zygote.c). Everything here is written by sandcell itself and read by
 * the zygote or by a child of it before any untrusted code runs; the
 * zygote still checks every length, so a broken request is refused
 * rather than misread.
 */
#ifndef SANDCELL_ZYGOTE_H
#define SANDCELL_ZYGOTE_H

#include <stdint.h>
#include <linux/audit.h>

/* The architecture a seccomp program of ours checks first (capture.c, the
 * keeper's filter in zygote.c); none elsewhere. */
#if defined(__x86_64__)
#define SCZ_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SCZ_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* The environment variable that makes this binary a zygote: its value is
 * the number of the fd of its SOCK_SEQPACKET socket to sandcell. */
#define SCZ_ENV "_SANDCELL_ZYGOTE"

#define SCZ_MAGIC 0x5a434353u /* "SCCZ" little-endian */
#define SCZ_VERSION 2

#define SCZ_MAP_LEN 256
#define SCZ_MAX_TASKS 8
#define SCZ_MAX_EXTRA 16
#define SCZ_MAX_SOURCES 16
#define SCZ_MSG_LEN 512

/* A request to start one sandbox: the fixed part, sent as the data of
 * one SOCK_SEQPACKET message whose SCM_RIGHTS carry, in order:
 *   plan (a memfd holding the plan, see SCZ_P_*), sync (the child's end
 *   of its socket to sandcell), stdin, stdout, stderr, nextra extra
 *   files (fds 3.. of the program), nsources bind-mount sources
 *   (open_tree(OPEN_TREE_CLONE) copies the child moves into place:
 *   sources it may not reach by path from its user namespace), ntasks cgroup v1 "tasks" files
 *   the child joins by writing "0" to each, and, if cgroup2 is set, the
 *   run's cgroup v2 directory (clone3 CLONE_INTO_CGROUP). */
struct scz_request {
	uint32_t magic;
	uint32_t version;
	uint64_t clone_flags;   /* CLONE_NEW* except CLONE_NEWCGROUP */
	uint32_t nextra;
	uint32_t nsources;
	uint32_t ntasks;
	uint32_t cgroup2;
	uint32_t setgroups_deny;
	int32_t oom_score_adj;
	uint32_t oom_score_adj_set;
	char uid_map[SCZ_MAP_LEN]; /* written to /proc/PID/uid_map as is */
	char gid_map[SCZ_MAP_LEN];
};

/* The zygote's answer: status 0 and the child's pid (its pidfd attached),
 * or an errno and a message. */
struct scz_reply {
	int32_t status;
	int32_t pid;
	char msg[SCZ_MSG_LEN];
};

/* The plan: records of (uint32 key, uint32 length, payload padded to 4
 * bytes). Strings carry no NUL. A mount's payload is eight uint32 (flags,
 * cleared flags, number of propagation flags, the source's fd (its index
 * among the request's sources plus one; 0: the source path), then the
 * lengths of device, source, destination and data) followed by the
 * propagation flags and the four strings, each NUL-terminated. */
enum scz_plan_key {
	SCZ_P_ROOTFS = 1,
	SCZ_P_ROOTPROP,     /* u32: mount propagation of / (0: MS_SLAVE|MS_REC) */
	SCZ_P_READONLYFS,   /* u32 */
	SCZ_P_MOUNT,
	SCZ_P_DEVICE,       /* str: a host device node bind-mounted at its path */
	SCZ_P_SETUPDEV,     /* u32 */
	SCZ_P_HOSTNAME,     /* str */
	SCZ_P_DOMAINNAME,   /* str */
	SCZ_P_ROPATH,       /* str */
	SCZ_P_MASKPATH,     /* str */
	SCZ_P_NNP,          /* u32 */
	SCZ_P_SECCOMP_FLAGS,/* u32: seccomp(2) flags; 0 loads with prctl(2) */
	SCZ_P_SECCOMP_BPF,  /* struct sock_filter[] */
	SCZ_P_KEYRING,      /* str: the session keyring to join */
	SCZ_P_KEYPERM,      /* u32: permission bits added to it */
	SCZ_P_LOOPBACK,     /* u32: bring lo up */
	SCZ_P_CGROUPNS,     /* u32: unshare the cgroup namespace once joined */
	SCZ_P_CWD,          /* str */
	SCZ_P_ARG,          /* str, repeated */
	SCZ_P_ENV,          /* str, repeated: the environment exactly */
	SCZ_P_PATH,         /* str: PATH for finding argv[0] */
	SCZ_P_UID,          /* u32 */
	SCZ_P_GID,          /* u32 */
	SCZ_P_SETGROUPS,    /* u32: clear the supplementary groups (setupUser) */
	SCZ_P_SETGROUPS0,   /* u32: clear them as root of the namespace first (nsexec stage-2) */
	SCZ_P_UMASK,        /* u32 */
	SCZ_P_END,
};

/* The child tells sandcell over its sync socket: */
#define SCZ_READY 'R' /* set up, waiting for SCZ_GO */
#define SCZ_ERROR 'E' /* followed by a message; the child exits */
/* and sandcell answers: */
#define SCZ_GO 'G'    /* exec the program */
/* and once the program has ended, the run's init (runinit.c) writes: */
#define SCZ_STATUS 'S' /* followed by the program's wait status, int32 */

/* argv[1] of the run's init started by libcontainer (runinit.c). */
#define SCZ_INIT_ARG "_sandcell-init"

/* A live sandbox's init in agent mode (runinit.c, sc_init_agent) and
 * sandcell talk over a SOCK_SEQPACKET socket pair, one message a
 * request or a report, every field in the host's byte order.
 *
 * sandcell asks (struct sc_agent_req, then for SPAWN its strings: cwd,
 * argv..., env..., each NUL-terminated; with SCM_RIGHTS the process's
 * stdin, stdout and stderr, none with a terminal): */
#define SCZ_AGENT_SPAWN 1  /* start a process in a session of its own */
#define SCZ_AGENT_SIGNAL 2 /* signal pid's process group (one it started) */
#define SCZ_AGENT_PTY 1    /* SPAWN flag: on a new terminal of rows x cols */
struct sc_agent_req {
	uint32_t op, flags;
	int32_t pid, sig;
	uint32_t nargv, nenv;
	uint16_t rows, cols;
	uint32_t pad;
};
/* and the init reports (struct sc_agent_msg; SPAWNED with a terminal
 * carries its master by SCM_RIGHTS): */
#define SCZ_AGENT_SPAWNED 1 /* pid started */
#define SCZ_AGENT_FAILED 2  /* val: the errno of its start */
#define SCZ_AGENT_EXITED 3  /* pid ended, val its wait status */
struct sc_agent_msg {
	uint32_t kind;
	int32_t pid, val;
	uint32_t pad;
};
/* Bounds: the processes it tracks at once, the size of a request. */
#define SCZ_AGENT_MAX_PROCS 1024
#define SCZ_AGENT_MAX_REQ (128 * 1024)
#define SCZ_AGENT_MAX_STRS 8192

/* The run's init (runinit.c): prog is the program's pid, statusfd the
 * fd that takes its status. */
void sc_init_run(long prog, int statusfd) __attribute__((noreturn));
/* The init as code of its own (InitELF): the section's bytes and the
 * entry point's offset in them. */
void sc_init_code(const char **start, long *len, long *entry);

/* What the seccomp capture (capture.c) writes to stdout. */
#define SCZ_BPF_MAGIC 0x46504253u /* "SBPF" */

#endif
