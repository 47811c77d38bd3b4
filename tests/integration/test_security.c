/*
 * test_security.c - who may talk to the proxy, checked before any memory is
 * shared (SPEC §5.1): the client limit, the peer's credentials (SO_PEERCRED),
 * the hello's magic, version and tenant, and the modes of the socket and of
 * the directory the proxy creates for it. Refusals carry a code and no
 * descriptors, then the socket closes. The proxy has the descriptors
 * --max-clients clients need, and keeps clients of its own uid out of its
 * memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "http_get.h"
#include "shm_abi.h"
#include "uds.h"
#include "tests/cmocka_main.h"

#define NOBODY 65534

static int open_fds(void)
{
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own */
}

/*
 * A hand-made handshake: send h, receive the welcome. Returns the number of
 * descriptors that came with it (closed here), or -errno; then checks the
 * proxy closed the socket when it refused.
 */
static int raw_hello(const char *path, const struct lc_hello *h, struct lc_welcome *w, int *closed)
{
	int fds[LC_UDS_MAX_FDS], sock, n;

	memset(w, 0, sizeof(*w));
	*closed = 0;
	sock = lc_uds_connect(path, 0);
	if (sock < 0)
		return sock;
	/* A client may take its time between connect and hello; a proxy that
	 * answers (and closes) before reading the hello loses its answer. */
	h_sleep_ms(20);
	n = lc_uds_send(sock, h, sizeof(*h), NULL, 0);
	if (n == 0)
		n = lc_uds_recv(sock, w, sizeof(*w), fds, LC_UDS_MAX_FDS, 5000);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	if (n >= 0) {
		struct pollfd p = {sock, POLLIN | POLLRDHUP, 0};
		char c;

		*closed = poll(&p, 1, 2000) == 1 && recv(sock, &c, 1, MSG_DONTWAIT) <= 0;
	}
	close(sock);
	return n;
}

static struct lc_hello good_hello(void)
{
	struct lc_hello h = {
	    .magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION, .pid = (uint32_t)getpid()};

	return h;
}

/* A raw hello must be refused with want, no descriptors, socket closed. */
static void expect_refused(const char *sock, const struct lc_hello *h, int want, const char *what)
{
	struct lc_welcome w;
	int n, closed;

	n = raw_hello(sock, h, &w, &closed);
	H_ASSERT_MSG(n >= 0, "%s: no welcome: %s (the proxy closed before reading the hello?)",
		     what, strerror(-n));
	H_ASSERT_MSG(n == 0, "%s: %d descriptors came with a refusal", what, n);
	H_ASSERT_MSG(w.magic == LC_SHM_MAGIC, "%s: welcome magic 0x%x", what, w.magic);
	H_ASSERT_MSG(w.code == want, "%s: code %d (%s), expected %d (%s)", what, w.code,
		     h_code(w.code), want, h_code(want));
	H_ASSERT_MSG(closed, "%s: the socket stayed open after the refusal", what);
}

static struct h_proc *start(const char *name, char *sock, size_t cap)
{
	struct h_proc *p;

	snprintf(sock, cap, "%s", h_path(name));
	strncat(sock, ".sock", cap - strlen(sock) - 1);
	p = h_start_proxy(name, sock, H_EMBEDDED, "--segment-size", "16MiB", "--max-clients", "2",
			  NULL);
	H_ASSERT_MSG(p != NULL, "proxy %s did not start", name);
	return p;
}

static int setup(void **state)
{
	(void)state;
	umask(022);  /* what the proxy's mkdir gets, so the modes below are its own */
	h_keyless(); /* local-socket security; a proxy run as nobody cannot read our key */
	return h_init();
}

/* (a) --max-clients 2: the third is refused with a code, and a slot frees
 * up again when a client leaves. */
static void test_security_max_clients(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *p = start("limit", sock, sizeof(sock));
	struct lunar_client *c1, *c2, *c3 = NULL;
	struct lc_hello h = good_hello();
	uint64_t end;
	int rc = 0;

	(void)state;
	c1 = h_client(sock);
	c2 = h_client(sock);
	c3 = h_client_try(sock, 5000, &rc);
	H_ASSERT(c3 == NULL);
	H_ASSERT_EQ(rc, LUNAR_ERR_TOO_MANY_CLIENTS);
	expect_refused(sock, &h, LUNAR_ERR_TOO_MANY_CLIENTS, "third client");
	H_ASSERT_EQ(lunar_health(c1), 0);
	H_ASSERT_EQ(lunar_health(c2), 0);

	lunar_close(c1);
	end = h_now_ms() + 2000;
	do {
		c3 = h_client_try(sock, 5000, &rc);
		if (!c3)
			h_sleep_ms(20);
	} while (!c3 && h_now_ms() < end);
	H_ASSERT_MSG(c3 != NULL, "no slot 2 s after a client left: %d (%s)", rc, h_code(rc));
	H_ASSERT_EQ(lunar_health(c3), 0);
	lunar_close(c2);
	lunar_close(c3);
	h_stop(p);
}

struct connect_want {
	const char *sock;
	int want;
};

/*
 * In a child of another uid (h_run_as): lunar_connect must return want, and
 * a raw hello must bring back that code and no descriptor. 0 when it all
 * held, else 1 with the reason on stderr.
 */
static int connect_as(void *arg)
{
	const struct connect_want *cw = arg;
	struct lunar_opts o = {.socket_path = cw->sock, .timeout_ms = 5000};
	struct lunar_client *c = NULL;
	struct lc_hello h = good_hello();
	struct lc_welcome w;
	int rc, n, before, closed;

	before = open_fds();
	rc = lunar_connect(&o, &c);
	if (rc != cw->want) {
		fprintf(stderr, "child %u:%u: lunar_connect = %d (%s), expected %d (%s)\n",
			(unsigned)getuid(), (unsigned)getgid(), rc, h_code(rc), cw->want,
			h_code(cw->want));
		return 1;
	}
	if (c) {
		lunar_close(c);
		return 0;
	}
	n = raw_hello(cw->sock, &h, &w, &closed);
	if (n != 0 || w.code != cw->want || !closed || open_fds() != before) {
		fprintf(
		    stderr,
		    "child %u:%u: raw hello got %d fds, code %d (%s), closed %d; fds %d -> %d\n",
		    (unsigned)getuid(), (unsigned)getgid(), n, w.code, h_code(w.code), closed,
		    before, open_fds());
		return 1;
	}
	return 0;
}

static int run_child(const char *sock, uid_t uid, gid_t gid, int want)
{
	struct connect_want cw = {sock, want};

	return h_run_as(uid, gid, connect_as, &cw);
}

/*
 * (b) A peer that is neither the proxy's user nor in its group is refused by
 * SO_PEERCRED, before any memory is mapped. The socket and its directory are
 * opened up to everyone first, so the refusal is the credential check's and
 * not the file system's.
 */
static void test_security_unauthorized_uid(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *p;

	(void)state;
	if (geteuid() != 0) {
		printf("  skipped: needs root to run a client as uid %d\n", NOBODY);
		skip();
	}
	H_ASSERT(chmod(h_tmpdir(), 0755) == 0);
	p = start("creds", sock, sizeof(sock));
	H_ASSERT(chmod(sock, 0666) == 0);

	H_ASSERT_EQ(run_child(sock, NOBODY, NOBODY, LUNAR_ERR_UNAUTHORIZED), 0);
	/* Control: the same uid in the proxy's group is let in (default rule). */
	H_ASSERT_EQ(run_child(sock, NOBODY, getegid(), 0), 0);
	/* And the refusal hurt nobody. */
	{
		struct lunar_client *c = h_client(sock);

		H_ASSERT_EQ(lunar_health(c), 0);
		lunar_close(c);
	}
	H_ASSERT(chmod(h_tmpdir(), 0700) == 0);
	h_stop(p);
}

/* (c) (d) and the rest of the hello: refused with a code, no descriptors. */
static void test_security_bad_hellos(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *p = start("hello", sock, sizeof(sock));
	struct lc_hello h;
	int fd;

	(void)state;
	h = good_hello();
	h.version = 99;
	expect_refused(sock, &h, LUNAR_ERR_VERSION_MISMATCH, "version 99");

	h = good_hello();
	h.magic = 0xdeadbeef;
	expect_refused(sock, &h, LUNAR_ERR_PROTOCOL, "bad magic");

	h = good_hello();
	memset(h.tenant, 'x', sizeof(h.tenant)); /* no NUL */
	expect_refused(sock, &h, LUNAR_ERR_INVALID_PARAMS, "unterminated tenant");

	h = good_hello();
	strcpy(h.tenant, "../etc");
	expect_refused(sock, &h, LUNAR_ERR_INVALID_PARAMS, "tenant ../etc");

	/* Half a hello, then gone. */
	fd = lc_uds_connect(sock, 0);
	H_ASSERT(fd >= 0);
	H_ASSERT_EQ(lc_uds_send(fd, &h, 10, NULL, 0), 0);
	close(fd);

	/* The proxy is still fine. */
	{
		struct lunar_client *c = h_client(sock);

		H_ASSERT_EQ(lunar_health(c), 0);
		lunar_close(c);
	}
	h_stop(p);
}

/* (e) The socket is 0660, and a directory the proxy had to create 0750. */
static void test_security_socket_modes(void **state)
{
	char dir[PATH_MAX], sock[PATH_MAX + 16];
	struct h_proc *p;
	struct stat st;

	(void)state;
	snprintf(dir, sizeof(dir), "%s", h_path("run-lunar"));
	snprintf(sock, sizeof(sock), "%s/proxy.sock", dir);
	H_ASSERT(access(dir, F_OK) != 0);
	p = h_start_proxy("modes", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(p != NULL);
	H_ASSERT(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
	H_ASSERT_MSG((st.st_mode & 07777) == 0750, "directory mode %04o, expected 0750",
		     (unsigned)(st.st_mode & 07777));
	H_ASSERT(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode));
	H_ASSERT_MSG((st.st_mode & 07777) == 0660, "socket mode %04o, expected 0660",
		     (unsigned)(st.st_mode & 07777));
	h_stop(p);
	H_ASSERT_MSG(access(sock, F_OK) != 0, "the socket file outlived the proxy");
}

/* The "Max open files" soft and hard limits of pid. */
static void open_files_limit(pid_t pid, unsigned long long *soft, unsigned long long *hard)
{
	char path[64], line[256];
	FILE *f;

	*soft = *hard = 0;
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Max open files %llu %llu", soft, hard) == 2)
			break;
	if (f)
		fclose(f);
}

/* A proxy started with the soft limit of open files at soft. */
static struct h_proc *start_with_files(const char *name, char *sock, size_t cap, rlim_t soft)
{
	struct rlimit old, rl;
	struct h_proc *p;

	H_ASSERT(getrlimit(RLIMIT_NOFILE, &old) == 0);
	rl = (struct rlimit){soft, old.rlim_max};
	H_ASSERT(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	p = start(name, sock, cap);
	H_ASSERT(setrlimit(RLIMIT_NOFILE, &old) == 0);
	return p;
}

/*
 * (e) Each client holds a few of the proxy's descriptors, so the usual soft
 * limit of open files (1024) would serve fewer clients than --max-clients
 * allows: the proxy takes the hard limit, and warns when even that is
 * short for --max-clients.
 */
static void test_security_open_files_raised(void **state)
{
	unsigned long long soft, hard;
	struct rlimit now;
	char sock[PATH_MAX], line[256];
	struct h_proc *p;

	(void)state;
	H_ASSERT(getrlimit(RLIMIT_NOFILE, &now) == 0);
	if (now.rlim_max == RLIM_INFINITY || now.rlim_max < 512) {
		printf("  skipped: the hard limit of open files here is %llu\n",
		       (unsigned long long)now.rlim_max);
		skip();
	}
	p = start_with_files("nofile", sock, sizeof(sock), 256);
	open_files_limit(p->pid, &soft, &hard);
	print_message("started with 256 of %llu open files: runs with %llu\n",
		      (unsigned long long)now.rlim_max, soft);
	H_ASSERT_EQ(soft, (unsigned long long)now.rlim_max);
	H_ASSERT_EQ(hard, (unsigned long long)now.rlim_max);
	h_stop(p);
	/* --max-clients 2 needs about 264: a hard limit of 200 is warned of
	 * (set by prlimit(1), which then runs the proxy as itself) */
	snprintf(sock, sizeof(sock), "%s", h_path("nofile-low.sock"));
	{
		char *argv[] = {"prlimit",
				"--nofile=100:200",
				(char *)h_bin("lunar-proxy"),
				"--socket",
				sock,
				"--embedded-master",
				"--data-port",
				"0",
				"--http-port",
				"0",
				"--segment-size",
				"16MiB",
				"--max-clients",
				"2",
				NULL};

		p = h_spawn("nofile-low", argv);
	}
	H_ASSERT(p != NULL && h_wait_proxy(p, sock, 10000) == 0);
	H_ASSERT_EQ(hg_log_find(p->log, "open files limited to 200: 2 clients need about 264", line,
				sizeof(line)),
		    0);
	h_stop(p);
}

/* Ways into the proxy pid a process of its uid finds: its memory, and the
 * descriptors it holds (among them every client's memfd). */
static int ways_in(pid_t pid)
{
	char path[64];
	int ways = 0, fd;

	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ways++;
		close(fd);
	}
	for (int n = 0; n < 64; n++) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, n);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ways++;
			close(fd);
		}
	}
	return ways;
}

/* In a child of the proxy's uid (h_run_as): the ways into pid, at most 100. */
static int probe(void *arg)
{
	int ways = ways_in(*(pid_t *)arg);

	return ways > 100 ? 100 : ways;
}

/* A proxy run as uid (through setpriv when that is not ours, as root), with
 * extra (or NULL) on its command line and a client holding a region in it:
 * *cl. */
static struct h_proc *start_as(const char *name, uid_t uid, gid_t gid, char *extra,
			       struct lunar_client **cl)
{
	char dir[PATH_MAX], sock[PATH_MAX], reuid[32], regid[32];
	char *argv[24];
	struct h_proc *p;
	void *mem;
	int n = 0;

	snprintf(dir, sizeof(dir), "%s", h_path(name));
	H_ASSERT(mkdir(dir, 0750) == 0 && chown(dir, uid, gid) == 0);
	H_ASSERT(strlen(dir) + sizeof("/proxy.sock") <= sizeof(sock));
	strcat(strcpy(sock, dir), "/proxy.sock");
	if (uid != geteuid()) {
		snprintf(reuid, sizeof(reuid), "--reuid=%u", (unsigned)uid);
		snprintf(regid, sizeof(regid), "--regid=%u", (unsigned)gid);
		argv[n++] = "/usr/bin/setpriv";
		argv[n++] = reuid;
		argv[n++] = regid;
		argv[n++] = "--clear-groups";
	}
	argv[n++] = (char *)h_bin("lunar-proxy");
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--embedded-master";
	argv[n++] = "--data-port=0";
	argv[n++] = "--http-port=0";
	argv[n++] = "--segment-size=16MiB";
	argv[n++] = extra;
	argv[n] = NULL;
	p = h_spawn(name, argv);
	H_ASSERT(p != NULL && h_wait_proxy(p, sock, 10000) == 0);
	*cl = h_client(sock);
	mem = lunar_alloc(*cl, 1 << 20);
	H_ASSERT(mem != NULL);
	memset(mem, 0x5a, 1 << 20);
	H_ASSERT_EQ(lunar_put(*cl, "kept-out", mem, 1 << 20, NULL), 0);
	return p;
}

/*
 * (f) A client of the proxy's own uid cannot reach the other clients'
 * memory through the proxy: /proc/<proxy>/mem and the proxy's descriptors
 * (each client's memfd among them) are closed to it. As root, proxy and
 * probe run as nobody: root's CAP_SYS_PTRACE would pass everything. The
 * same probe gets into a proxy run with --dumpable, so it can fail.
 */
static void test_security_same_uid_kept_out(void **state)
{
	int root = geteuid() == 0;
	uid_t uid = root ? NOBODY : geteuid();
	gid_t gid = root ? NOBODY : getegid();
	struct lunar_client *c1, *c2;
	struct h_proc *p1, *p2;
	int ways;

	(void)state;
	if (root && access("/usr/bin/setpriv", X_OK)) {
		printf("  skipped: needs setpriv (util-linux) to run a proxy as uid %d\n", NOBODY);
		skip();
	}
	H_ASSERT(chmod(h_tmpdir(), 0755) == 0);
	p1 = start_as("kept", uid, gid, NULL, &c1);
	p2 = start_as("open", uid, gid, "--dumpable", &c2);
	ways = h_run_as(uid, gid, probe, &p1->pid);
	H_ASSERT_MSG(ways >= 0, "the probe could not run as uid %u", (unsigned)uid);
	H_ASSERT_MSG(ways == 0, "a process of uid %u found %d ways into the proxy", (unsigned)uid,
		     ways);
	ways = h_run_as(uid, gid, probe, &p2->pid);
	print_message("uid %u: 0 ways into the proxy, %d into a --dumpable one\n", (unsigned)uid,
		      ways);
	H_ASSERT_MSG(ways >= 2, "only %d ways into a --dumpable proxy: the probe is blind", ways);
	H_ASSERT_EQ(lunar_health(c1), 0);
	lunar_close(c1);
	lunar_close(c2);
	H_ASSERT(chmod(h_tmpdir(), 0700) == 0);
	h_stop(p1);
	h_stop(p2);
}

LUNAR_TEST_MAIN(setup, h_teardown, test_security_max_clients, test_security_unauthorized_uid,
		test_security_bad_hellos, test_security_socket_modes,
		test_security_open_files_raised, test_security_same_uid_kept_out)
