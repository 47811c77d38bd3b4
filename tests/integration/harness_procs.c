/*
 * harness_procs.c - looking at and steering processes for the integration
 * tests (see harness.h): a process's descriptors, mappings, CPU time and
 * threads from /proc, stopping a process group, running a function as
 * another user, and forking a child that says when it is ready.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

int h_pid_fd_count(pid_t pid)
{
	return h_pid_fd_count_but_ports(pid, NULL, 0);
}

/* Add to out (up to cap) the inodes of the TCP connections (not
 * listeners) of pid's network namespace whose local port is one of
 * ports[0..nports); the new count. */
static int port_conn_inodes(pid_t pid, const char *table, const int *ports, int nports,
			    unsigned long *out, int n, int cap)
{
	char path[64], line[512];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, table);
	f = fopen(path, "re");
	if (!f)
		return n;
	while (fgets(line, sizeof(line), f) && n < cap) {
		unsigned lport, st;
		unsigned long inode;

		/* sl local:port remote:port st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line,
			   " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x %*u "
			   "%*u %lu",
			   &lport, &st, &inode) == 3 &&
		    st != 0x0a /* LISTEN */)
			for (int i = 0; i < nports; i++)
				if ((int)lport == ports[i]) {
					out[n++] = inode;
					break;
				}
	}
	fclose(f);
	return n;
}

int h_pid_fd_count_but_ports(pid_t pid, const int *ports, int nports)
{
	unsigned long skip[256];
	char path[320], link[64];
	int nskip = 0, n = 0;
	struct dirent *e;
	DIR *d;

	if (nports) {
		nskip = port_conn_inodes(pid, "tcp", ports, nports, skip, nskip, 256);
		nskip = port_conn_inodes(pid, "tcp6", ports, nports, skip, nskip, 256);
	}
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		unsigned long inode;
		ssize_t len;
		int skipped = 0;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)pid, e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len > 0) {
			link[len] = 0;
			if (sscanf(link, "socket:[%lu]", &inode) == 1)
				for (int i = 0; i < nskip && !skipped; i++)
					skipped = skip[i] == inode;
		}
		n += !skipped;
	}
	closedir(d);
	return n;
}

/* Print the line of pid's TCP tables that names inode, if one does. */
static void dump_socket(pid_t pid, unsigned long inode)
{
	static const char *const tables[] = {"tcp", "tcp6"};
	char path[64], line[512];

	for (int t = 0; t < 2; t++) {
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, tables[t]);
		if (!(f = fopen(path, "re")))
			continue;
		while (fgets(line, sizeof(line), f)) {
			unsigned long ino;

			if (sscanf(line, " %*d: %*s %*s %*x %*s %*s %*x %*u %*u %lu", &ino) == 1 &&
			    ino == inode)
				fprintf(stderr, "    %s: %s", tables[t], line);
		}
		fclose(f);
	}
}

void h_pid_dump_fds(pid_t pid)
{
	char path[320], link[256];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		ssize_t len;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)pid, e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		link[len > 0 ? len : 0] = 0;
		fprintf(stderr, "  pid %d fd %s -> %s\n", (int)pid, e->d_name, link);
		if (!strncmp(link, "socket:[", 8))
			dump_socket(pid, strtoul(link + 8, NULL, 10));
	}
	closedir(d);
}

int h_pid_maps_count(pid_t pid, const char *needle)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0)
		if (strstr(line, needle))
			n++;
	free(line);
	fclose(f);
	return n;
}

/* Read a /proc stat file: utime + stime in ms (returned), the name
 * between the parentheses (which may hold spaces) into comm, the minor
 * faults into *minflt and the state letter into *state (each when not
 * NULL); -1 if unreadable. */
static int64_t read_stat(const char *path, char *comm, size_t commlen, int64_t *minflt, char *state)
{
	unsigned long long ut = 0, st = 0, mf = 0;
	char s = 0;
	long tck = sysconf(_SC_CLK_TCK);
	char buf[1024], *lp, *rp;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	lp = strchr(buf, '(');
	rp = strrchr(buf, ')');
	if (!lp || !rp || rp < lp)
		return -1;
	if (comm)
		snprintf(comm, commlen, "%.*s", (int)(rp - lp - 1), lp + 1);
	/* After ") " come fields 3 (state) .. 13 (minflt is 10), then utime
	 * and stime. */
	if (sscanf(rp + 2, "%c %*d %*d %*d %*d %*d %*u %llu %*u %*u %*u %llu %llu", &s, &mf, &ut,
		   &st) != 4)
		return -1;
	if (minflt)
		*minflt = (int64_t)mf;
	if (state)
		*state = s;
	if (tck <= 0)
		tck = 100;
	return (int64_t)((ut + st) * 1000ull / (unsigned long long)tck);
}

int64_t h_pid_cpu_ms(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return read_stat(path, NULL, 0, NULL, NULL);
}

int64_t h_pid_minor_faults(pid_t pid)
{
	char path[64];
	int64_t n = -1;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return read_stat(path, NULL, 0, &n, NULL) < 0 ? -1 : n;
}

/* The first line of a /proc file into buf ("?" if it cannot be read). */
static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");

	if (!f || !fgets(buf, (int)len, f))
		snprintf(buf, len, "?");
	else
		buf[strcspn(buf, "\n")] = 0;
	if (f)
		fclose(f);
}

void h_pid_dump_threads(pid_t pid)
{
	char path[320], comm[64], wchan[64], sys[128];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		int64_t ms;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
		ms = read_stat(path, comm, sizeof(comm), NULL, NULL);
		snprintf(path, sizeof(path), "/proc/%d/task/%s/wchan", (int)pid, e->d_name);
		read_line(path, wchan, sizeof(wchan));
		snprintf(path, sizeof(path), "/proc/%d/task/%s/syscall", (int)pid, e->d_name);
		read_line(path, sys, sizeof(sys));
		fprintf(stderr, "  pid %d thread %s (%s): %lld ms CPU, in %s, syscall %.40s\n",
			(int)pid, e->d_name, comm, (long long)ms, wchan, sys);
	}
	closedir(d);
}

/* 1 when every thread of pid is stopped (state T or t), 0 when one is
 * not, -1 if its threads cannot be read. */
static int pid_stopped(pid_t pid)
{
	char path[320], state;
	struct dirent *e;
	int stopped = 1;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while (stopped == 1 && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
		if (read_stat(path, NULL, 0, NULL, &state) >= 0 && state != 'T' && state != 't')
			stopped = 0;
	}
	closedir(d);
	return stopped;
}

int h_stop_group(struct h_proc *p)
{
	uint64_t end = h_now_ms() + H_STOP_WAIT_MS;
	int rc;

	if (!p->running || kill(-p->pid, SIGSTOP))
		return -1;
	while ((rc = pid_stopped(p->pid)) == 0 && h_now_ms() < end)
		h_sleep_ms(1);
	return rc == 1 ? 0 : -1;
}

int h_run_as(uid_t uid, gid_t gid, int (*fn)(void *arg), void *arg)
{
	int status = 0, rc;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if ((getuid() != uid || getgid() != gid) &&
		    (setgroups(0, NULL) || setgid(gid) || setuid(uid))) {
			fprintf(stderr, "harness: cannot become %u:%u: %s\n", (unsigned)uid,
				(unsigned)gid, strerror(errno));
			_exit(255);
		}
		rc = fn(arg);
		fflush(NULL);
		_exit(rc < 0 || rc > 254 ? 254 : rc);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) == 255)
		return -1;
	return WEXITSTATUS(status);
}

pid_t h_fork_ready(void (*child)(int ready_fd, void *arg), void *arg, int *rd)
{
	struct pollfd pf;
	int p[2], status = 0;
	pid_t pid;
	char b = 0;

	if (pipe2(p, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		child(p[1], arg);
		_exit(127);
	}
	close(p[1]);
	pf = (struct pollfd){p[0], POLLIN, 0};
	if (pid < 0 || poll(&pf, 1, H_READY_TIMEOUT_MS) != 1 || read(p[0], &b, 1) != 1 ||
	    b != 'R') {
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fprintf(stderr, "harness: child %d never got ready (status 0x%x)\n",
				(int)pid, status);
		}
		close(p[0]);
		return -1;
	}
	if (rd)
		*rd = p[0];
	else
		close(p[0]);
	return pid;
}
