/*
 * test_daemon_notify.c - lunar-master and lunar-proxy tell systemd
 * (Type=notify units) when they serve and when they stop: a datagram
 * "READY=1", then "STOPPING=1", to the socket $NOTIFY_SOCKET names (a path,
 * or "@name" in the abstract namespace). A bad $NOTIFY_SOCKET is logged,
 * and the daemon serves all the same.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "http_get.h"
#include "tests/cmocka_main.h"

#define NOTE_TIMEOUT_S 10

/* A datagram socket bound to name (a path, or "@name"); its fd. */
static int listen_notes(const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = NOTE_TIMEOUT_S};
	size_t len = strlen(name);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	H_ASSERT(fd >= 0 && len < sizeof(sa.sun_path));
	memcpy(sa.sun_path, name, len);
	if (name[0] == '@')
		sa.sun_path[0] = '\0';
	H_ASSERT_EQ(bind(fd, (struct sockaddr *)&sa,
			 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)),
		    0);
	H_ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	H_ASSERT_EQ(setenv("NOTIFY_SOCKET", name, 1), 0);
	return fd;
}

static void expect_note(int fd, const char *want)
{
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);

	H_ASSERT_MSG(n > 0, "no notification within %d s (want %s)", NOTE_TIMEOUT_S, want);
	buf[n] = '\0';
	H_ASSERT_MSG(!strcmp(buf, want), "notified '%s', want '%s'", buf, want);
}

/* READY=1 once p serves (its start waited for that), STOPPING=1 on SIGTERM. */
static void expect_ready_then_stopping(int fd, struct h_proc *p)
{
	H_ASSERT(p != NULL);
	expect_note(fd, "READY=1");
	H_ASSERT(h_stop(p) == 0);
	expect_note(fd, "STOPPING=1");
}

static void test_daemon_notify_master(void **state)
{
	int fd = listen_notes(h_path("notify.sock")), port = h_free_port();

	(void)state;
	expect_ready_then_stopping(fd, h_start_master("master", port, NULL));
	close(fd);
}

static void test_daemon_notify_proxy_abstract(void **state)
{
	char name[64];
	int fd;

	(void)state;
	snprintf(name, sizeof(name), "@lunar-test-notify-%d", (int)getpid());
	fd = listen_notes(name);
	expect_ready_then_stopping(fd, h_start_proxy("proxy", h_path("p.sock"), H_EMBEDDED, NULL));
	close(fd);
}

static void test_daemon_notify_bad_socket_logged(void **state)
{
	struct h_proc *p;
	char line[256];

	(void)state;
	H_ASSERT_EQ(setenv("NOTIFY_SOCKET", "relative/name", 1), 0);
	p = h_start_proxy("badnote", h_path("b.sock"), H_EMBEDDED, NULL);
	H_ASSERT(p != NULL);
	H_ASSERT_MSG(
	    hg_log_find(p->log, "cannot send READY=1 to $NOTIFY_SOCKET", line, sizeof(line)) == 0,
	    "the bad NOTIFY_SOCKET was not logged");
	H_ASSERT(h_stop(p) == 0);
}

static int unset_notify(void **state)
{
	unsetenv("NOTIFY_SOCKET");
	return h_teardown(state);
}

LUNAR_TEST_MAIN(h_setup, unset_notify, test_daemon_notify_master, test_daemon_notify_proxy_abstract,
		test_daemon_notify_bad_socket_logged)
