/* The second of two sandboxes run at once (see ipc_holder.c): while the
 * holder is alive it looks for the holder's shared objects by their
 * well-known names. Separate IPC, network and mount namespaces and private
 * tmpfs mounts must make every lookup fail; finding one is the escape (a
 * shared IPC namespace let containers read each other's memory: Docker's
 * --ipc=host warnings, Kubernetes hostIPC). */
#include "probe.h"
#include <mqueue.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#define KEY_SHM 0x5A4DCE11
#define KEY_SEM 0x5A4DCE12
#define KEY_MSG 0x5A4DCE13

static void found(const char *what, int ok) {
	if (ok)
		say("%s found ESCAPED\n", what);
	else
		say("%s %s\n", what, strerrorname_np(errno));
}

static long connect_abstract(void) {
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, "\0sandcell-hostile", 17);
	return connect(s, (struct sockaddr *)&sa, sizeof(sa.sun_family) + 17);
}

int main(void) {
	found("sysv_shm", shmget(KEY_SHM, 0, 0) >= 0);
	found("sysv_sem", semget(KEY_SEM, 0, 0) >= 0);
	found("sysv_msg", msgget(KEY_MSG, 0) >= 0);
	found("posix_shm", shm_open("/sandcell-hostile", O_RDONLY, 0) >= 0);
	found("posix_mq", mq_open("/sandcell-hostile", O_RDONLY) != (mqd_t)-1);
	found("abstract_socket", connect_abstract() == 0);
	struct stat st;
	found("tmp_marker", stat("/tmp/sandcell-hostile-marker", &st) == 0);
	found("work_marker", stat("/work/sandcell-hostile-marker", &st) == 0);
	found("shm_marker", stat("/dev/shm/sandcell-hostile-marker", &st) == 0);
	/* The whole SysV table of this IPC namespace: the holder's key, in
	 * decimal, must not be in it. */
	FILE *f = fopen("/proc/sysvipc/shm", "r");
	char line[512];
	int seen = 0;
	while (f && fgets(line, sizeof line, f))
		if (strstr(line, " 1515048465 "))
			seen = 1;
	say(seen ? "sysvipc_table holder key ESCAPED\n" : "sysvipc_table clean\n");
	say("done\n");
	return 0;
}
