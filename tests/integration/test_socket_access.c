/*
 * test_socket_access.c - a client of another uid, as an application in its
 * own container (uid 4242), reaches the proxy's socket only when the proxy
 * opens it up (--socket-mode, --socket-group), and is then served only when
 * the allow-list (--allow-uid, --allow-gid) names it: the file system lets
 * it knock, SO_PEERCRED decides. Needs root, to run the client as 4242.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http_get.h"

#define APP_ID 4242

/* In the child, as APP_ID:APP_ID: connect, then put and get one value. 0
 * when the connect returned want (and, served, the value came back), else
 * 1 with the reason on stderr. */
struct want {
	const char *sock;
	int rc;
};

static int app(void *arg)
{
	const struct want *w = arg;
	struct lunar_opts o = {.socket_path = w->sock, .timeout_ms = 5000};
	struct lunar_client *c = NULL;
	char out[16] = {0};
	int64_t n;
	int rc;

	rc = lunar_connect(&o, &c);
	if (rc != w->rc) {
		fprintf(stderr, "uid %u: lunar_connect = %d (%s), expected %d (%s)\n",
			(unsigned)getuid(), rc, h_code(rc), w->rc, h_code(w->rc));
		lunar_close(c);
		return 1;
	}
	if (!c)
		return 0;
	rc = lunar_put(c, "app-key", "from 4242", 9, NULL);
	n = lunar_get_into(c, "app-key", out, sizeof(out));
	lunar_close(c);
	if (rc || n != 9 || memcmp(out, "from 4242", 9)) {
		fprintf(stderr, "uid %u: put %d, get %lld '%s'\n", (unsigned)getuid(), rc,
			(long long)n, out);
		return 1;
	}
	return 0;
}

static int as_app(const char *sock, int want)
{
	struct want w = {sock, want};

	return h_run_as(APP_ID, APP_ID, app, &w);
}

/* A proxy serving <tmp>/<name>/proxy.sock, a directory it creates itself. */
static struct h_proc *start(const char *name, char sock[PATH_MAX], ...)
{
	char *argv[16];
	struct h_proc *p;
	va_list ap;
	int n = 0;

	snprintf(sock, PATH_MAX, "%s/proxy.sock", h_path(name));
	va_start(ap, sock);
	while (n < 15 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	p = h_start_proxy(name, sock, H_EMBEDDED, "--segment-size", "16MiB", n > 0 ? argv[0] : NULL,
			  n > 1 ? argv[1] : NULL, n > 2 ? argv[2] : NULL, n > 3 ? argv[3] : NULL,
			  NULL);
	H_ASSERT_MSG(p != NULL, "proxy %s did not start", name);
	return p;
}

/* 1 when the proxy logged that it refused uid 4242 (SO_PEERCRED), within
 * a second (the line may follow its answer), 0 when it did not. */
static int proxy_refused_app(const struct h_proc *p)
{
	uint64_t end = h_now_ms() + 1000;
	char rest[64];

	do {
		if (!hg_log_find(p->log, "uid 4242 refused: UNAUTHORIZED", rest, sizeof(rest)))
			return 1;
		h_sleep_ms(20);
	} while (h_now_ms() < end);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		printf("  skipped: needs root to run a client as uid %d\n", APP_ID);
		return -1;
	}
	umask(022);
	if (h_init())
		return -1;
	/* Others may pass through the test's directory, as through /run. */
	return chmod(h_tmpdir(), 0755);
}

/* Today's defaults (0660, the proxy's group): uid 4242 cannot even reach
 * the socket, allow-listed or not (liblunar says UNAUTHORIZED for EACCES
 * too: the proxy's log tells the two apart). */
static void test_socket_access_default_refused(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *p = start("plain", sock, "--allow-uid", "4242", NULL);
	struct stat st;

	(void)state;
	H_ASSERT(stat(sock, &st) == 0);
	H_ASSERT_EQ(st.st_mode & 07777, 0660);
	H_ASSERT(stat(h_path("plain"), &st) == 0);
	H_ASSERT_EQ(st.st_mode & 07777, 0750);
	H_ASSERT_EQ(as_app(sock, LUNAR_ERR_UNAUTHORIZED), 0);
	H_ASSERT_MSG(!proxy_refused_app(p), "the proxy saw uid 4242: the file system let it in");
	h_stop(p);
}

/* --socket-mode 0666: 4242 reaches the socket; the allow-list decides. */
static void test_socket_access_mode(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *p = start("open", sock, "--socket-mode", "0666", NULL);
	struct stat st;

	(void)state;
	H_ASSERT(stat(sock, &st) == 0);
	H_ASSERT_EQ(st.st_mode & 07777, 0666);
	H_ASSERT(stat(h_path("open"), &st) == 0);
	H_ASSERT_EQ(st.st_mode & 07777, 0751);
	H_ASSERT_EQ(as_app(sock, LUNAR_ERR_UNAUTHORIZED), 0);
	H_ASSERT_MSG(proxy_refused_app(p), "uid 4242 never reached the proxy");
	h_stop(p);

	p = start("open2", sock, "--socket-mode", "0666", "--allow-uid", "4242", NULL);
	H_ASSERT_EQ(as_app(sock, 0), 0);
	h_stop(p);
}

/* --socket-group 4242: the group reaches socket and directory (0660, 0750),
 * and is served once --allow-gid names it. */
static void test_socket_access_group(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *p = start("grp", sock, "--socket-group", "4242", NULL);
	struct stat st;

	(void)state;
	H_ASSERT(stat(sock, &st) == 0);
	H_ASSERT_EQ(st.st_gid, APP_ID);
	H_ASSERT_EQ(st.st_mode & 07777, 0660);
	H_ASSERT(stat(h_path("grp"), &st) == 0);
	H_ASSERT_EQ(st.st_gid, APP_ID);
	H_ASSERT_EQ(st.st_mode & 07777, 0750);
	H_ASSERT_EQ(as_app(sock, LUNAR_ERR_UNAUTHORIZED), 0);
	H_ASSERT_MSG(proxy_refused_app(p), "uid 4242 never reached the proxy");
	h_stop(p);

	p = start("grp2", sock, "--socket-group", "4242", "--allow-gid", "4242", NULL);
	H_ASSERT_EQ(as_app(sock, 0), 0);
	h_stop(p);
}

/* Bad values stop the proxy before it starts, exit 2. */
static void test_socket_access_bad_values(void **state)
{
	const char *bad[][2] = {{"--socket-mode", "0400"},
				{"--socket-mode", "4770"},
				{"--socket-mode", "66x"},
				{"--socket-mode", "-0666"},
				{"--socket-group", "no-such-group-x"}};
	struct h_proc *p;
	int st;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *argv[] = {(char *)h_bin("lunar-proxy"),
				"--embedded-master",
				"--socket",
				(char *)h_path("bad.sock"),
				(char *)bad[i][0],
				(char *)bad[i][1],
				NULL};

		p = h_spawn("bad", argv);
		H_ASSERT(p != NULL);
		st = h_wait_exit(p, 5000);
		H_ASSERT_MSG(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2,
			     "%s %s: status %d, expected exit 2", bad[i][0], bad[i][1], st);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_socket_access_default_refused),
	    cmocka_unit_test(test_socket_access_mode),
	    cmocka_unit_test(test_socket_access_group),
	    cmocka_unit_test(test_socket_access_bad_values),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid() != 0) {
		printf("skipped: needs root to run a client as uid %d\n", APP_ID);
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, h_teardown);
}
