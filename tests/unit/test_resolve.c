/*
 * test_resolve.c - name lookups bounded by the caller's deadline
 * (common/resolve.c) and the dials that use them: a numeric host and a
 * name from /etc/hosts resolve; in a mount and network namespace of its
 * own whose resolv.conf names a DNS server that never answers (a UDP
 * socket nobody reads), a name's lookup gives up at its deadline, not
 * after the resolver's 5 s an attempt, and so do a master call
 * (lp_spreq_call) and a data transfer (eng_xfer) to a host of that name.
 * The namespace needs root; without it that part is skipped, saying why.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "engine/engine.h"
#include "lunar.h"
#include "resolve.h"
#include "sp_req.h"
#include "tests/cmocka_main.h"

#define SILENT_NAME "lunar-silent.test"
#define DEADLINE_MS 300
#define BOUND_MS    2000 /* well under the resolver's 5 s */
#define CHILD_MS    20000
#define NO_NS	    77 /* the child's exit: no namespace for it */

static const struct addrinfo stream = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};

static void test_resolve_numeric_and_hosts_file(void **state)
{
	struct addrinfo *ai = NULL;

	(void)state;
	assert_int_equal(lc_resolve("127.0.0.1", "80", &stream, lc_now_ms() + 1000, &ai), 0);
	assert_non_null(ai);
	assert_int_equal(ai->ai_family, AF_INET);
	freeaddrinfo(ai);
	ai = NULL;
	/* /etc/hosts has localhost: a name, so looked up on a thread. */
	assert_int_equal(lc_resolve("localhost", "80", &stream, lc_now_ms() + 5000, &ai), 0);
	assert_non_null(ai);
	freeaddrinfo(ai);
	ai = NULL;
	assert_int_equal(lc_resolve("localhost", "80", &stream, LC_NO_DEADLINE, &ai), 0);
	assert_non_null(ai);
	freeaddrinfo(ai);
	assert_int_equal(lc_resolve("127.0.0.1", "x", &stream, lc_now_ms() + 1000, &ai),
			 -EHOSTUNREACH);
}

/* --- the child, in its namespace: plain checks, its exit status says --- */

static int report(const char *what, long got, uint64_t ms)
{
	fprintf(stderr, "test_resolve: %s: got %ld after %llu ms\n", what, got,
		(unsigned long long)ms);
	return 1;
}

/* Write text to a new file at path: 0 or -1. */
static int put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	int rc = f && fputs(text, f) >= 0 ? 0 : -1;

	if (f && fclose(f))
		rc = -1;
	return rc;
}

/* Why the namespace could not be made: a line, then -1. */
static int no_ns(const char *step)
{
	fprintf(stderr, "test_resolve: %s: %s\n", step, strerror(errno));
	return -1;
}

/* Loopback up, this resolv.conf and nsswitch.conf, and a DNS server on
 * 127.0.0.1:53 that never answers (its fd stays open): 0 or -1. */
static int silent_dns(const char *dir)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(53),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct ifreq ifr = {0};
	char rc_path[512], ns_path[512];
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	snprintf(rc_path, sizeof(rc_path), "%s/resolv.conf", dir);
	snprintf(ns_path, sizeof(ns_path), "%s/nsswitch.conf", dir);
	strcpy(ifr.ifr_name, "lo");
	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		return no_ns("loopback");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		return no_ns("loopback up");
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return no_ns("bind 127.0.0.1:53");
	if (put_file(rc_path, "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n") ||
	    put_file(ns_path, "hosts: files dns\n"))
		return no_ns("a file in the temporary directory");
	if (mount(rc_path, "/etc/resolv.conf", NULL, MS_BIND, NULL))
		return no_ns("bind mount on /etc/resolv.conf");
	if (mount(ns_path, "/etc/nsswitch.conf", NULL, MS_BIND, NULL))
		return no_ns("bind mount on /etc/nsswitch.conf");
	return 0;
}

static int silent_checks(void)
{
	struct eng_config cfg = {.host = "127.0.0.1", .io_timeout_ms = DEADLINE_MS};
	struct addrinfo *ai = NULL;
	struct lp_spreq *rq;
	struct eng_engine *e;
	char buf[64] = {0};
	struct iovec v = {buf, sizeof(buf)};
	void *reply = NULL;
	size_t reply_len;
	uint64_t t0 = lc_now_ms(), ms;
	int rc, bad = 0;

	rc = lc_resolve(SILENT_NAME, "80", &stream, t0 + DEADLINE_MS, &ai);
	ms = lc_now_ms() - t0;
	if (rc != -ETIMEDOUT || ms < DEADLINE_MS || ms > BOUND_MS)
		bad |= report("lc_resolve", rc, ms);
	if (lp_spreq_alloc("tcp://" SILENT_NAME ":5000", 4096, &rq))
		return report("lp_spreq_alloc", -1, 0);
	t0 = lc_now_ms();
	rc = lp_spreq_call(rq, "x", 1, &reply, &reply_len, t0 + DEADLINE_MS);
	ms = lc_now_ms() - t0;
	if (rc != -ETIMEDOUT || ms > BOUND_MS)
		bad |= report("lp_spreq_call", rc, ms);
	lp_spreq_free(rq);
	if (eng_engine_create(&cfg, &e))
		return report("eng_engine_create", -1, 0);
	t0 = lc_now_ms();
	rc = eng_xfer(e, SILENT_NAME ":5000", ENG_READ, 0, &v, 1, NULL, NULL);
	ms = lc_now_ms() - t0;
	if ((rc != ENG_XFER_UNSENT && rc != LUNAR_ERR_TRANSFER_FAIL) || ms > BOUND_MS)
		bad |= report("eng_xfer", rc, ms);
	eng_engine_destroy(e);
	return bad;
}

/* The checks in a child of its own mount and network namespaces. */
static int child_main(const char *dir)
{
	if (unshare(CLONE_NEWNS | CLONE_NEWNET))
		no_ns("unshare (needs root)");
	else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		no_ns("mounts private");
	else if (!silent_dns(dir))
		return silent_checks();
	return NO_NS;
}

static void test_resolve_silent_dns_bounded_by_deadline(void **state)
{
	char dir[] = "/tmp/lunar-resolve-XXXXXX";
	uint64_t until;
	pid_t pid;
	int st = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	pid = fork();
	assert_true(pid >= 0);
	if (!pid)
		_exit(child_main(dir));
	until = lc_now_ms() + CHILD_MS;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (lc_now_ms() > until) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fail_msg("the child did not finish within %d ms", CHILD_MS);
		}
		usleep(10000);
	}
	{
		char path[512];

		snprintf(path, sizeof(path), "%s/resolv.conf", dir);
		unlink(path);
		snprintf(path, sizeof(path), "%s/nsswitch.conf", dir);
		unlink(path);
		rmdir(dir);
	}
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == NO_NS) {
		print_message("skipped: no namespace with a silent DNS server here (the line "
			      "above says why)\n");
		skip();
	}
	assert_int_equal(WEXITSTATUS(st), 0);
}

LUNAR_TEST_MAIN(NULL, NULL, test_resolve_numeric_and_hosts_file,
		test_resolve_silent_dns_bounded_by_deadline)
