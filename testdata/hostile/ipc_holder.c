/* The first of two sandboxes run at once (see ipc_seeker.c): it creates
 * every shared object it can under well-known names (SysV shared memory,
 * semaphores and message queues with fixed keys, POSIX shared memory and
 * message queue, an abstract Unix socket, marker files in /tmp, /work and
 * /dev/shm), says READY, waits while the seeker looks for them, then
 * checks that they are still its own. */
#include "probe.h"
#include <mqueue.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/un.h>

#define KEY_SHM 0x5A4DCE11
#define KEY_SEM 0x5A4DCE12
#define KEY_MSG 0x5A4DCE13

static void marker(const char *p) {
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0666);
	if (fd >= 0) {
		write(fd, "holder-secret\n", 14);
		close(fd);
	}
	say("marker %s %s\n", p, fd >= 0 ? "ok" : strerrorname_np(errno));
}

int main(void) {
	int shm = shmget(KEY_SHM, 4096, IPC_CREAT | 0666);
	if (shm >= 0) {
		char *m = shmat(shm, NULL, 0);
		if (m != (void *)-1)
			strcpy(m, "holder-secret");
	}
	say("sysv_shm %s\n", shm >= 0 ? "ok" : strerrorname_np(errno));
	int sem = semget(KEY_SEM, 1, IPC_CREAT | 0666);
	say("sysv_sem %s\n", sem >= 0 ? "ok" : strerrorname_np(errno));
	int msg = msgget(KEY_MSG, IPC_CREAT | 0666);
	say("sysv_msg %s\n", msg >= 0 ? "ok" : strerrorname_np(errno));
	int pshm = shm_open("/sandcell-hostile", O_CREAT | O_RDWR, 0666);
	if (pshm >= 0)
		write(pshm, "holder-secret", 13);
	say("posix_shm %s\n", pshm >= 0 ? "ok" : strerrorname_np(errno));
	struct mq_attr attr = {0, 4, 64, 0, {0}};
	mqd_t mq = mq_open("/sandcell-hostile", O_CREAT | O_RDWR, 0666, &attr);
	say("posix_mq %s\n", mq != (mqd_t)-1 ? "ok" : strerrorname_np(errno));
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, "\0sandcell-hostile", 17);
	int b = bind(s, (struct sockaddr *)&sa, sizeof(sa.sun_family) + 17);
	if (b == 0)
		listen(s, 8);
	say("abstract_socket %s\n", b == 0 ? "ok" : strerrorname_np(errno));
	marker("/tmp/sandcell-hostile-marker");
	marker("/work/sandcell-hostile-marker");
	marker("/dev/shm/sandcell-hostile-marker");
	say("READY\n");
	sleep(4);
	int still = shmget(KEY_SHM, 0, 0) >= 0 && semget(KEY_SEM, 0, 0) >= 0 && msgget(KEY_MSG, 0) >= 0;
	say(still ? "HELD\n" : "LOST\n");
	return 0;
}
