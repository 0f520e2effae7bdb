/* Privilege through exec: setuid-root binaries of the layer (su, mount and
 * the like; CVE-2021-4034 pkexec) and a setuid copy in /tmp or /work.
 * no_new_privs makes exec never raise privileges, /tmp and /work are
 * nosuid, and no capability is left in any set. */
#include "probe.h"
#include <dirent.h>
#include <grp.h>
#include <sys/stat.h>

static int suid_root = 0;

static void scan(const char *dir) {
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char p[512];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & (S_ISUID | S_ISGID))) {
			say("setid file %s owner %d mode %o\n", p, (int)st.st_uid, (int)st.st_mode & 07777);
			suid_root++;
		}
	}
	if (d)
		closedir(d);
}

static void status_line(const char *key) {
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, key, strlen(key)) == 0)
			say("%s", line);
	if (f)
		fclose(f);
}

static int copy(const char *from, const char *to) {
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	char buf[65536];
	ssize_t n;
	if (in < 0 || out < 0)
		return -1;
	while ((n = read(in, buf, sizeof buf)) > 0)
		if (write(out, buf, n) != n)
			return -1;
	close(in);
	close(out);
	return 0;
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "child") == 0) {
		say("child euid %d uid %d\n", (int)geteuid(), (int)getuid());
		if (geteuid() != getuid())
			say("setuid exec raised privileges ESCAPED\n");
		return 0;
	}
	status_line("NoNewPrivs");
	status_line("CapEff");
	status_line("CapPrm");
	status_line("CapBnd");
	status_line("CapAmb");
	say("uid %d euid %d\n", (int)getuid(), (int)geteuid());
	PROBE("setuid0", setuid(0));
	PROBE("setresuid0", setresuid(0, 0, 0));
	PROBE("setgid0", setgid(0));
	PROBE("setgroups0", setgroups(0, NULL));
	PROBE("chown_root", chown(argv[0], 0, 0));
	scan("/bin");
	scan("/sbin");
	scan("/usr/bin");
	scan("/usr/sbin");
	scan("/usr/lib/dbus-1.0");
	scan("/usr/libexec");
	say("setid_files %d\n", suid_root);
	/* A setuid copy of ourselves: owner is the sandbox user anyway, but
	 * nosuid and no_new_privs must keep even that from applying. */
	const char *dirs[] = {"/tmp/suid", "/work/suid", "/dev/shm/suid"};
	for (int i = 0; i < 3; i++) {
		if (copy("/proc/self/exe", dirs[i]) < 0 || chmod(dirs[i], 04755 | 02000) < 0) {
			say("copy %s %s\n", dirs[i], strerrorname_np(errno));
			continue;
		}
		pid_t p = fork();
		if (p == 0) {
			execl(dirs[i], dirs[i], "child", (char *)NULL);
			say("exec %s %s\n", dirs[i], strerrorname_np(errno));
			_exit(1);
		}
		waitpid(p, NULL, 0);
	}
	say("done\n");
	return 0;
}
