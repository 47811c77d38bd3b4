/*
 * harness.c - child processes, temp dirs, ports and readiness waits for the
 * integration tests (see harness.h). Nothing a test starts may outlive it:
 * children die with us (PR_SET_PDEATHSIG), and atexit plus SIGINT/SIGTERM
 * handlers kill whatever is still running.
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

#define H_MAX_PROCS 64
#define H_MAX_ARGS  48
#define H_LOG_TAIL  4096

static struct h_proc procs[H_MAX_PROCS];
static int nprocs;
static char tmpdir[128];
static pid_t owner_pid; /* forked test children must not run our clean-up */
static int initialized;
static int keep_tmpdir; /* $LUNAR_TEST_KEEP, read once: getenv is not signal-safe */

uint64_t h_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void h_sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Async-signal-safe: kill() and waitpid() only. */
static void kill_children(void)
{
	for (int i = 0; i < nprocs; i++) {
		pid_t pid = procs[i].pid;

		if (pid <= 0 || !procs[i].running)
			continue;
		if (kill(-pid, SIGKILL) != 0)
			kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		procs[i].running = 0;
		procs[i].pid = 0;
	}
}

static void on_signal(int sig)
{
	if (getpid() == owner_pid) {
		kill_children();
		/* nftw is not async-signal-safe; rm(1) through fork+exec is. */
		if (tmpdir[0] && !keep_tmpdir) {
			pid_t pid = fork();

			if (pid == 0) {
				char *const argv[] = {"rm", "-rf", tmpdir, NULL};

				execv("/bin/rm", argv);
				_exit(127);
			}
			if (pid > 0)
				waitpid(pid, NULL, 0);
		}
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void at_exit(void)
{
	if (getpid() == owner_pid)
		h_cleanup();
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (remove(path) != 0 && errno != ENOENT)
		fprintf(stderr, "harness: remove %s: %s\n", path, strerror(errno));
	return 0;
}

void h_cleanup(void)
{
	if (!initialized || getpid() != owner_pid)
		return;
	h_stop_all();
	if (tmpdir[0]) {
		if (keep_tmpdir)
			fprintf(stderr, "harness: keeping %s\n", tmpdir);
		else
			nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
		tmpdir[0] = '\0';
	}
}

/* Socket paths must fit sun_path (108 bytes), so a long $TMPDIR falls back
 * to /tmp. */
static int make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");

	if (!base || !*base || strlen(base) > 60)
		base = "/tmp";
	snprintf(tmpdir, sizeof(tmpdir), "%s/lunar-it-XXXXXX", base);
	if (mkdtemp(tmpdir))
		return 0;
	fprintf(stderr, "harness: mkdtemp %s: %s\n", tmpdir, strerror(errno));
	tmpdir[0] = '\0';
	return -1;
}

int h_init(void)
{
	struct sigaction sa;

	if (initialized && tmpdir[0])
		return 0;
	owner_pid = getpid();
	keep_tmpdir = getenv("LUNAR_TEST_KEEP") != NULL;
	if (make_tmpdir() != 0)
		return -1;
	if (!initialized) {
		atexit(at_exit);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_signal;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
	}
	initialized = 1;
	return 0;
}

const char *h_tmpdir(void)
{
	return tmpdir;
}

const char *h_path(const char *name)
{
	static char bufs[H_PATHS][PATH_MAX];
	static unsigned next;
	char *b = bufs[next++ % H_PATHS];

	snprintf(b, PATH_MAX, "%s/%s", tmpdir, name);
	return b;
}

void h_named_sock(char sock[PATH_MAX], const char *name)
{
	char file[64];

	snprintf(file, sizeof(file), "%s.sock", name);
	snprintf(sock, PATH_MAX, "%s", h_path(file));
}

const char *h_bin(const char *name)
{
	static char bufs[4][PATH_MAX];
	static unsigned next;
	char *b = bufs[next++ % 4];
	const char *build = getenv("BUILD");

	if (!build || !*build)
		build = "build";
	snprintf(b, PATH_MAX, "%s/bin/%s", build, name);
	return b;
}

int h_free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int fd, port = -1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static void log_cmdline(int fd, char *const argv[])
{
	dprintf(fd, "==== harness: start:");
	for (int i = 0; argv[i]; i++)
		dprintf(fd, " %s", argv[i]);
	dprintf(fd, "\n");
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void exec_child(pid_t parent, int logfd, char *const argv[])
{
	sigset_t none;
	int null;

	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127); /* the test died before prctl took effect */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	null = open("/dev/null", O_RDONLY);
	if (null >= 0)
		dup2(null, STDIN_FILENO);
	dup2(logfd, STDOUT_FILENO);
	dup2(logfd, STDERR_FILENO);
	/* Nothing of ours leaks in, above all not a client's socket to a proxy,
	 * which would hide that client's hang-up from the proxy. */
	if (close_range(3, ~0u, 0) != 0)
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
	execvp(argv[0], argv);
	dprintf(STDERR_FILENO, "harness: exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

struct h_proc *h_spawn(const char *name, char *const argv[])
{
	struct h_proc *p;
	pid_t parent = getpid(), pid;
	int fd;

	if (!tmpdir[0] && h_init() != 0)
		return NULL;
	if (nprocs == H_MAX_PROCS) {
		fprintf(stderr, "harness: too many processes\n");
		return NULL;
	}
	p = &procs[nprocs];
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	snprintf(p->log, sizeof(p->log), "%s/%s.log", tmpdir, name);
	fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "harness: open %s: %s\n", p->log, strerror(errno));
		return NULL;
	}
	log_cmdline(fd, argv);
	fflush(NULL); /* nothing buffered may be written twice */
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "harness: fork: %s\n", strerror(errno));
		close(fd);
		return NULL;
	}
	if (pid == 0)
		exec_child(parent, fd, argv);
	setpgid(pid, pid); /* also here, so kill(-pid) works at once */
	close(fd);
	p->pid = pid;
	p->running = 1;
	nprocs++;
	return p;
}

static int reap(struct h_proc *p, int flags)
{
	int status;
	pid_t r;

	if (!p->running)
		return 1;
	do
		r = waitpid(p->pid, &status, flags);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return 0;
	p->status = r == p->pid ? status : -1;
	p->running = 0;
	p->pid = 0;
	return 1;
}

int h_alive(struct h_proc *p)
{
	return p && !reap(p, WNOHANG);
}

int h_wait_exit(struct h_proc *p, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;

	while (!reap(p, WNOHANG)) {
		if (h_now_ms() >= end)
			return -1;
		h_sleep_ms(10);
	}
	return p->status;
}

static void signal_group(struct h_proc *p, int sig)
{
	if (kill(-p->pid, sig) != 0)
		kill(p->pid, sig);
}

int h_stop(struct h_proc *p)
{
	if (!p)
		return -1;
	if (!p->running)
		return p->status;
	signal_group(p, SIGTERM);
	if (h_wait_exit(p, H_STOP_GRACE_MS) != -1)
		return p->status;
	fprintf(stderr, "harness: %s ignored SIGTERM for %d ms, killing it\n", p->name,
		H_STOP_GRACE_MS);
	signal_group(p, SIGKILL);
	reap(p, 0);
	return p->status;
}

void h_kill(struct h_proc *p)
{
	if (!p || !p->running)
		return;
	signal_group(p, SIGKILL);
	reap(p, 0);
}

void h_stop_all(void)
{
	for (int i = 0; i < nprocs; i++)
		h_stop(&procs[i]);
}

static void describe_exit(const struct h_proc *p, char *buf, size_t len)
{
	if (p->running)
		snprintf(buf, len, "running, pid %d", (int)p->pid);
	else if (p->status == -1)
		snprintf(buf, len, "reaped, status unknown");
	else if (WIFEXITED(p->status))
		snprintf(buf, len, "exited %d", WEXITSTATUS(p->status));
	else if (WIFSIGNALED(p->status))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(p->status));
	else
		snprintf(buf, len, "status 0x%x", p->status);
}

void h_dump_log(const struct h_proc *p)
{
	char buf[H_LOG_TAIL + 1], state[64];
	ssize_t n;
	off_t size;
	int fd;

	if (!p)
		return;
	describe_exit(p, state, sizeof(state));
	fprintf(stderr, "---- log of %s (%s): %s\n", p->name, state, p->log);
	fd = open(p->log, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "(cannot open: %s)\n", strerror(errno));
		return;
	}
	size = lseek(fd, 0, SEEK_END);
	if (size > H_LOG_TAIL) {
		lseek(fd, size - H_LOG_TAIL, SEEK_SET);
		fprintf(stderr, "(... last %d bytes)\n", H_LOG_TAIL);
	} else {
		lseek(fd, 0, SEEK_SET);
	}
	n = read(fd, buf, H_LOG_TAIL);
	close(fd);
	if (n > 0) {
		buf[n] = '\0';
		fputs(buf, stderr);
		if (buf[n - 1] != '\n')
			fputc('\n', stderr);
	}
	fprintf(stderr, "---- end of %s\n", p->name);
}

void h_dump_logs(void)
{
	for (int i = 0; i < nprocs; i++) {
		/* Refresh the state so the dump says whether it crashed. */
		h_alive(&procs[i]);
		h_dump_log(&procs[i]);
	}
}

void h_on_fail(void)
{
	fflush(stdout);
	h_dump_logs();
}

const char *h_code(int64_t v)
{
	if (v >= 0 || v < INT32_MIN)
		return "-";
	return lunar_strerror((int)v);
}

static int tcp_connects(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd, ok;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static int not_ready(struct h_proc *p, const char *what, uint64_t start)
{
	fprintf(stderr, "harness: %s not ready (%s) after %llu ms\n", p->name, what,
		(unsigned long long)(h_now_ms() - start));
	h_dump_log(p);
	return -1;
}

int h_wait_tcp(struct h_proc *p, int port, int timeout_ms)
{
	uint64_t start = h_now_ms(), end = start + (uint64_t)timeout_ms;

	for (;;) {
		if (tcp_connects(port))
			return 0;
		if (!h_alive(p))
			return not_ready(p, "it exited", start);
		if (h_now_ms() >= end)
			return not_ready(p, "no TCP listener", start);
		h_sleep_ms(20);
	}
}

static int proxy_answers(const char *sockpath)
{
	struct lunar_client *c = NULL;
	int ok;

	c = h_client_try(sockpath, 2000, NULL);
	if (!c)
		return 0;
	ok = lunar_health(c) == 0;
	lunar_close(c);
	return ok;
}

int h_wait_proxy(struct h_proc *p, const char *sockpath, int timeout_ms)
{
	uint64_t start = h_now_ms(), end = start + (uint64_t)timeout_ms;

	for (;;) {
		if (access(sockpath, F_OK) == 0 && proxy_answers(sockpath))
			return 0;
		if (!h_alive(p))
			return not_ready(p, "it exited", start);
		if (h_now_ms() >= end)
			return not_ready(p, "no healthy connection", start);
		h_sleep_ms(50);
	}
}

/* Appends the NULL-terminated va_list to argv; -1 when it does not fit. */
static int add_args(char **argv, int *n, va_list ap)
{
	const char *a;

	while ((a = va_arg(ap, const char *)) != NULL) {
		if (*n >= H_MAX_ARGS - 1)
			return -1;
		argv[(*n)++] = (char *)a;
	}
	argv[*n] = NULL;
	return 0;
}

static int check_bin(const char *path)
{
	if (access(path, X_OK) == 0)
		return 0;
	fprintf(stderr, "harness: %s is missing (%s); build it first (make BUILD=...)\n", path,
		strerror(errno));
	return -1;
}

static struct h_proc *start_master_v(const char *name, int port, va_list ap)
{
	char *argv[H_MAX_ARGS], portstr[16];
	const char *bin = h_bin("lunar-master");
	struct h_proc *p;
	int n = 0;

	if (check_bin(bin) != 0)
		return NULL;
	snprintf(portstr, sizeof(portstr), "%d", port);
	argv[n++] = (char *)bin;
	argv[n++] = "--listen";
	argv[n++] = "127.0.0.1";
	argv[n++] = "--port";
	argv[n++] = portstr;
	argv[n++] = "--http-port";
	argv[n++] = "0";
	if (add_args(argv, &n, ap) != 0)
		return NULL;
	p = h_spawn(name, argv);
	if (!p)
		return NULL;
	if (h_wait_tcp(p, port, H_READY_TIMEOUT_MS) != 0) {
		h_kill(p);
		return NULL;
	}
	return p;
}

struct h_proc *h_start_master(const char *name, int port, ...)
{
	struct h_proc *p;
	va_list ap;

	va_start(ap, port);
	p = start_master_v(name, port, ap);
	va_end(ap);
	return p;
}

struct h_proc *h_cluster_master(int *port, ...)
{
	struct h_proc *p;
	va_list ap;

	if (h_init() != 0 || (*port = h_free_port()) <= 0)
		return NULL;
	va_start(ap, port);
	p = start_master_v("master", *port, ap);
	va_end(ap);
	return p;
}

/* data_port 0: the kernel picks it. */
/* Whether this process has CAP_SYS_PTRACE, which reads any process's /proc. */
static int can_ptrace_any(void)
{
	unsigned long long caps = 0;
	char line[256];
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			break;
	fclose(f);
	return (caps >> 19) & 1; /* CAP_SYS_PTRACE */
}

static struct h_proc *start_proxy_v(const char *name, const char *sockpath, int master_port,
				    int data_port, va_list ap)
{
	char *argv[H_MAX_ARGS], master[64], port[16];
	const char *bin = h_bin("lunar-proxy");
	struct h_proc *p;
	int n = 0, first_extra, rc, has_segment = 0;

	if (check_bin(bin) != 0)
		return NULL;
	argv[n++] = (char *)bin;
	argv[n++] = "--socket";
	argv[n++] = (char *)sockpath;
	if (master_port == H_EMBEDDED) {
		argv[n++] = "--embedded-master";
	} else {
		snprintf(master, sizeof(master), "tcp://127.0.0.1:%d", master_port);
		argv[n++] = "--master";
		argv[n++] = master;
	}
	argv[n++] = "--host";
	argv[n++] = "127.0.0.1";
	snprintf(port, sizeof(port), "%d", data_port);
	argv[n++] = "--data-port";
	argv[n++] = port;
	argv[n++] = "--http-port";
	argv[n++] = "0";
	first_extra = n;
	rc = add_args(argv, &n, ap);
	if (rc != 0 || n + 3 >= H_MAX_ARGS)
		return NULL;
	for (int i = first_extra; i < n; i++)
		if (strcmp(argv[i], "--segment-size") == 0)
			has_segment = 1;
	if (!has_segment) {
		argv[n++] = "--segment-size";
		argv[n++] = "64MiB";
	}
	/* Tests read the proxy's /proc/<pid>/fd, maps, mem and syscall, which a
	 * proxy that is not dumpable keeps from a test without CAP_SYS_PTRACE. */
	if (!can_ptrace_any())
		argv[n++] = "--dumpable";
	argv[n] = NULL;
	p = h_spawn(name, argv);
	if (!p)
		return NULL;
	if (h_wait_proxy(p, sockpath, H_READY_TIMEOUT_MS) != 0) {
		h_kill(p);
		return NULL;
	}
	return p;
}

struct h_proc *h_start_proxy(const char *name, const char *sockpath, int master_port, ...)
{
	struct h_proc *p;
	va_list ap;

	va_start(ap, master_port);
	p = start_proxy_v(name, sockpath, master_port, 0, ap);
	va_end(ap);
	return p;
}

struct h_proc *h_start_peer(const char *name, const char *sockpath, int master_port,
			    char seg[H_SEG_NAME], ...)
{
	struct h_proc *p;
	int port = h_free_port();
	va_list ap;

	if (port <= 0)
		return NULL;
	snprintf(seg, H_SEG_NAME, "127.0.0.1:%d", port);
	va_start(ap, seg);
	p = start_proxy_v(name, sockpath, master_port, port, ap);
	va_end(ap);
	return p;
}

struct h_proc *h_embedded_node(char sock[PATH_MAX], struct lunar_client **cl, ...)
{
	struct h_proc *p;
	va_list ap;

	if (h_init() != 0)
		return NULL;
	snprintf(sock, PATH_MAX, "%s", h_path("proxy.sock"));
	va_start(ap, cl);
	p = start_proxy_v("proxy", sock, H_EMBEDDED, 0, ap);
	va_end(ap);
	if (p && cl && !(*cl = h_client_try(sock, H_CLIENT_TIMEOUT_MS, NULL)))
		return NULL;
	return p;
}

int h_setup(void **state)
{
	(void)state;
	return h_init();
}

int h_teardown(void **state)
{
	(void)state;
	h_cleanup();
	return 0;
}

void h_embedded_node_stop(struct lunar_client **cl)
{
	if (cl && *cl) {
		lunar_close(*cl);
		*cl = NULL;
	}
	h_cleanup();
}

static struct lunar_client *client_try(const struct lunar_opts *opts, int *rc)
{
	struct lunar_client *c = NULL;
	int r;

	r = lunar_connect(opts, &c);
	if (rc)
		*rc = r;
	if (r != 0) {
		if (c)
			lunar_close(c);
		return NULL;
	}
	return c;
}

struct lunar_client *h_client_try(const char *sockpath, unsigned timeout_ms, int *rc)
{
	struct lunar_opts opts = {.socket_path = sockpath, .timeout_ms = timeout_ms};

	return client_try(&opts, rc);
}

struct lunar_client *h_client_arena(const char *sockpath, unsigned timeout_ms, size_t arena_bytes)
{
	struct lunar_opts opts = {
	    .socket_path = sockpath, .timeout_ms = timeout_ms, .arena_bytes = arena_bytes};
	struct lunar_client *c;
	int rc = 0;

	c = client_try(&opts, &rc);
	H_ASSERT_MSG(c != NULL, "lunar_connect(%s) = %d (%s)", sockpath, rc, h_code(rc));
	return c;
}

struct lunar_client *h_client(const char *sockpath)
{
	return h_client_arena(sockpath, H_CLIENT_TIMEOUT_MS, 0);
}

/* FNV-1a: a stable seed per key. */
uint64_t h_seed(const char *key)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *key; key++)
		h = (h ^ (uint8_t)*key) * 0x100000001b3ull;
	return h ? h : 1;
}

/* splitmix64 keyed by seed and the 8-byte word's index: any byte can be
 * checked on its own, and neighbouring objects differ everywhere. */
static uint64_t word_at(uint64_t seed, uint64_t idx)
{
	uint64_t z = seed + (idx + 1) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void h_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *b = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = word_at(seed, i / 8);

		memcpy(b + i, &w, 8);
	}
	if (i < len) {
		uint64_t w = word_at(seed, i / 8);

		memcpy(b + i, &w, len - i);
	}
}

int64_t h_verify(const void *buf, size_t len, uint64_t seed)
{
	const uint8_t *b = buf;

	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = word_at(seed, i / 8);
		size_t n = len - i < 8 ? len - i : 8;

		if (memcmp(b + i, &w, n) != 0) {
			for (size_t j = 0; j < n; j++)
				if (b[i + j] != ((const uint8_t *)&w)[j])
					return (int64_t)(i + j);
		}
	}
	return -1;
}

int h_pid_fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
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

void h_pid_dump_threads(pid_t pid)
{
	char path[320], comm[64];
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
		fprintf(stderr, "  pid %d thread %s (%s): %lld ms CPU\n", (int)pid, e->d_name, comm,
			(long long)ms);
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

uint8_t *h_app_memfd(const char *name, size_t len, int *fd)
{
	uint8_t *p;

	*fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	H_ASSERT_MSG(*fd >= 0, "memfd_create: %s", strerror(errno));
	H_ASSERT(ftruncate(*fd, (off_t)len) == 0);
	H_ASSERT(fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	H_ASSERT(p != MAP_FAILED);
	return p;
}
