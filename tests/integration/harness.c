/*
 * harness.c - child processes, temp dirs and ports for the integration
 * tests (see harness.h); starting daemons is harness_daemons.c's job,
 * clients and values harness_clients.c's, /proc looks harness_procs.c's.
 * Nothing a test starts may outlive it: children die with us
 * (PR_SET_PDEATHSIG), and atexit plus SIGINT/SIGTERM handlers kill whatever
 * is still running.
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
#include <pthread.h>
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

#include "auth.h"

#define H_MAX_PROCS  128 /* test_daemon_flags runs some 70, one after the other */
#define H_LOG_TAIL   4096
#define H_REPORT_MAX 16384 /* of a sanitizer report, printed */

static struct h_proc procs[H_MAX_PROCS];
static int nprocs;
static char tmpdir[128];
static pid_t owner_pid; /* forked test children must not run our clean-up */
static int initialized;
static int keep_tmpdir; /* $LUNAR_TEST_KEEP, read once: getenv is not signal-safe */

const char *h_sanitizer(void)
{
	return getenv("LUNAR_TEST_SANITIZER");
}

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

/* Sanitizer reports found in the children's logs: the test binary then
 * exits 1, since a daemon's report (a race, a leak at exit) ends no test. */
static int sanitizer_reports;

/*
 * Whether the LeakSanitizer report at r (up to its SUMMARY line) names only
 * blocks allocated on nng's own threads: every frame above the allocator in
 * libnng or the thread start. nng 1.5 frees some pipes of peers it closed
 * (a rejected or killed peer) late, on its reaper, and at a daemon's exit
 * after nng_fini they can remain; a leak of ours has a frame of ours.
 */
static int nng_own_leak(const char *r)
{
	const char *end = strstr(r, "SUMMARY:"), *line, *eol;
	int frames = 0;

	if (!end)
		return 0;
	for (line = r; line < end; line = eol + 1) {
		const char *hash = line;
		size_t len;

		eol = memchr(line, '\n', (size_t)(end - line));
		if (!eol)
			eol = end;
		len = (size_t)(eol - line);
		while (hash < eol && *hash == ' ')
			hash++;
		if (hash == eol || *hash != '#' || !strncmp(hash, "#0 ", 3))
			continue;
		frames++;
		if (!memmem(line, len, "libnng.so", 9) && !memmem(line, len, "start_thread", 12) &&
		    !memmem(line, len, "libc.so", 7))
			return 0;
	}
	return frames > 0;
}

/* Under a sanitizer, print and count a report in p's log, if it has one. */
static void check_reports(const struct h_proc *p)
{
	static const char *const marks[] = {"WARNING: ThreadSanitizer:", "ERROR: AddressSanitizer:",
					    "ERROR: LeakSanitizer:", "runtime error:"};
	char buf[H_REPORT_MAX + 1];
	struct stat st;
	char *text, *at;
	ssize_t n;
	int fd;

	fd = open(p->log, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) != 0 || !(text = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return;
	}
	n = pread(fd, text, (size_t)st.st_size, 0);
	close(fd);
	if (n > 0)
		text[n] = '\0';
	for (size_t i = 0; n > 0 && i < sizeof(marks) / sizeof(marks[0]); i++) {
		at = memmem(text, (size_t)n, marks[i], strlen(marks[i]));
		if (!at)
			continue;
		snprintf(buf, sizeof(buf), "%.*s", (int)(text + n - at), at);
		if (i == 2 && nng_own_leak(at)) {
			fprintf(stderr,
				"harness: not counted: %s's leak report names only blocks of "
				"nng's own threads (nng 1.5 frees closed peers' pipes late):\n%s\n",
				p->name, buf);
			continue;
		}
		fprintf(stderr, "harness: a sanitizer report in the log of %s (%s):\n%s\n", p->name,
			p->log, buf);
		sanitizer_reports++;
		break;
	}
	free(text);
}

static void at_exit(void)
{
	if (getpid() != owner_pid)
		return;
	h_cleanup();
	if (sanitizer_reports) {
		fprintf(stderr, "harness: %d sanitizer report(s) in the children's logs\n",
			sanitizer_reports);
		_exit(1);
	}
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
	for (int i = 0; h_sanitizer() && i < nprocs; i++)
		check_reports(&procs[i]);
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

/*
 * Every daemon and tool a test starts proves a cluster key (SPEC §13), as a
 * production cluster does: one key per temporary directory, named to the
 * children by $LUNAR_CLUSTER_KEY_FILE. $LUNAR_TEST_KEYLESS (set by a test
 * before h_init) runs them keyless instead.
 */
static int make_cluster_key(void)
{
	const char *path = h_path("cluster.key");
	int rc;

	if (getenv("LUNAR_TEST_KEYLESS")) {
		unsetenv(AUTH_KEY_ENV);
		return 0;
	}
	rc = auth_init();
	if (!rc)
		rc = auth_keygen(path);
	if (rc || setenv(AUTH_KEY_ENV, path, 1)) {
		fprintf(stderr, "harness: cannot make the cluster key %s: %d\n", path, rc);
		return -1;
	}
	return 0;
}

void h_keyless(void)
{
	setenv("LUNAR_TEST_KEYLESS", "1", 1);
	unsetenv(AUTH_KEY_ENV);
}

const char *h_cluster_key(void)
{
	return getenv(AUTH_KEY_ENV);
}

int h_init(void)
{
	struct sigaction sa;

	if (initialized && tmpdir[0])
		return 0;
	owner_pid = getpid();
	keep_tmpdir = getenv("LUNAR_TEST_KEEP") != NULL;
	if (make_tmpdir() != 0 || make_cluster_key() != 0)
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

int h_failpoint_build(const char *daemon)
{
	char fp_build[PATH_MAX];
	const char *build = getenv("BUILD"), *bin;

	snprintf(fp_build, sizeof(fp_build), "%s/failpoints", build && *build ? build : "build");
	setenv("BUILD", fp_build, 1);
	bin = h_bin(daemon);
	if (access(bin, X_OK)) {
		printf("skipped: no %s (make failpoints builds it; make test does)\n", bin);
		return 77;
	}
	return 0;
}

/* The ports h_free_port handed out last: bind(:0) may pick one again,
 * and two daemons given it fight over it (two masters were given one HTTP
 * port once, and the second exited). */
#define PORTS_KEPT 1024
static int ports_given[PORTS_KEPT];
static unsigned ports_n;
static pthread_mutex_t ports_lock = PTHREAD_MUTEX_INITIALIZER;

static int port_given(int port)
{
	unsigned n = ports_n < PORTS_KEPT ? ports_n : PORTS_KEPT;

	for (unsigned i = 0; i < n; i++)
		if (ports_given[i] == port)
			return 1;
	return 0;
}

/* A loopback port the kernel picks for bind(:0), or -1. */
static int any_port(void)
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

int h_free_port(void)
{
	int port;

	pthread_mutex_lock(&ports_lock);
	do
		port = any_port();
	while (port > 0 && port_given(port));
	if (port > 0)
		ports_given[ports_n++ % PORTS_KEPT] = port;
	pthread_mutex_unlock(&ports_lock);
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
	fprintf(stderr, "harness: %s ignored SIGTERM for %d ms, killing it; its threads:\n",
		p->name, H_STOP_GRACE_MS);
	h_pid_dump_threads(p->pid);
	h_dump_log(p);
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
