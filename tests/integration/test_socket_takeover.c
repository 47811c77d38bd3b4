/*
 * test_socket_takeover.c - a proxy's socket path belongs to the proxy serving
 * it (SPEC §13, "Local socket"): a second proxy on the same --socket exits 1
 * naming the path, and the first keeps its clients and keys; a proxy removes
 * at exit only the socket file it created, not one that replaced it; and the
 * socket file a killed proxy left behind is still taken over.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "uds.h"
#include "tests/cmocka_main.h"

/* A proxy refused its socket exits within this (it maps its segment first). */
#define REFUSE_BOUND_MS 5000

static const char value[] = "kept by the first proxy";

/* Start a proxy on sock without waiting for it to serve: it may be refused. */
static struct h_proc *spawn_proxy(const char *name, const char *sock)
{
	char *argv[] = {(char *)h_bin("lunar-proxy"),
			"--socket",
			(char *)sock,
			"--embedded-master",
			"--host",
			"127.0.0.1",
			"--data-port",
			"0",
			"--http-port",
			"0",
			"--segment-size",
			"16MiB",
			NULL};
	struct h_proc *p = h_spawn(name, argv);

	H_ASSERT(p != NULL);
	return p;
}

/* A second proxy on a live proxy's socket must exit 1, naming the path, and
 * must take nothing from the first: its path, clients and keys. */
static void assert_refused(const char *name, const char *sock)
{
	struct h_proc *p = spawn_proxy(name, sock);
	int st = h_wait_exit(p, REFUSE_BOUND_MS);

	H_ASSERT_MSG(st != -1, "%s still runs on a socket another proxy serves", name);
	H_ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: status %#x, expected exit 1", name,
		     st);
	H_ASSERT_MSG(h_log_has(p, sock), "%s's log does not name %s", name, sock);
	H_ASSERT_MSG(h_log_has(p, "another proxy serves it"), "%s's log does not say why", name);
}

static void put_key(const char *sock, const char *key)
{
	struct lunar_client *cl = h_client(sock);

	H_ASSERT_EQ(lunar_put(cl, key, value, sizeof(value), NULL), 0);
	lunar_close(cl);
}

static void assert_key(const char *sock, const char *key)
{
	struct lunar_client *cl = h_client(sock);
	char got[sizeof(value)] = {0};

	H_ASSERT_EQ(lunar_get_into(cl, key, got, sizeof(got)), sizeof(value));
	H_ASSERT(memcmp(got, value, sizeof(value)) == 0);
	lunar_close(cl);
}

static void test_socket_takeover_live_proxy_keeps_path(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *a;
	struct stat before, after;

	(void)state;
	/* Given proxy A serving a socket, with a key stored */
	h_named_sock(sock, "live");
	a = h_start_proxy("a", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(a != NULL);
	put_key(sock, "live-key");
	H_ASSERT(stat(sock, &before) == 0);
	/* When proxy B starts on the same path, it is refused */
	assert_refused("b", sock);
	/* Then A still owns the path, and a new client reaches A and its key */
	H_ASSERT(h_alive(a));
	H_ASSERT(stat(sock, &after) == 0);
	H_ASSERT(after.st_dev == before.st_dev && after.st_ino == before.st_ino);
	assert_key(sock, "live-key");
	H_ASSERT(WIFEXITED(h_stop(a)));
}

static void test_socket_takeover_replaced_path_left_alone(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *a;
	struct stat st, left;
	int other, cl, status;

	(void)state;
	/* Given proxy A whose socket file was removed, and another listener's
	 * socket created at the path */
	h_named_sock(sock, "replaced");
	a = h_start_proxy("a", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(a != NULL);
	H_ASSERT(unlink(sock) == 0);
	other = lc_uds_listen(sock, 0600);
	H_ASSERT_MSG(other >= 0, "listen on %s: %d", sock, other);
	H_ASSERT(stat(sock, &st) == 0);
	/* When A stops */
	status = h_stop(a);
	H_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Then the new socket is still there, and still answers */
	H_ASSERT_MSG(stat(sock, &left) == 0, "the stopping proxy removed %s", sock);
	H_ASSERT(left.st_dev == st.st_dev && left.st_ino == st.st_ino);
	cl = lc_uds_connect(sock, 1000);
	H_ASSERT_MSG(cl >= 0, "connect to the new socket: %d", cl);
	close(cl);
	H_ASSERT(h_log_has(a, "left in place"));
	close(other);
	unlink(sock);
}

static void test_socket_takeover_stale_socket_replaced(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *a, *b;
	struct stat st;
	int status;

	(void)state;
	/* Given the socket file of a proxy that was killed: nobody listens */
	h_named_sock(sock, "stale");
	a = h_start_proxy("a", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(a != NULL);
	h_kill(a);
	H_ASSERT(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode));
	H_ASSERT_EQ(lc_uds_connect(sock, 1000), -ECONNREFUSED);
	/* When proxy B starts on the path, it takes it over and serves */
	b = h_start_proxy("b", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(b != NULL);
	put_key(sock, "stale-key");
	/* Then the path is B's like any live proxy's: a third is refused */
	assert_refused("c", sock);
	assert_key(sock, "stale-key");
	/* And B removes its own file at exit */
	status = h_stop(b);
	H_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	H_ASSERT_MSG(access(sock, F_OK) != 0, "%s left behind by the proxy that made it", sock);
}

LUNAR_TEST_MAIN_EACH(h_setup, h_teardown, test_socket_takeover_live_proxy_keeps_path,
		     test_socket_takeover_replaced_path_left_alone,
		     test_socket_takeover_stale_socket_replaced)
