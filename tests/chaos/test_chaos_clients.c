/*
 * test_chaos_clients.c - a connection storm (SPEC §5.1 client limit): 5,000
 * clients connect to a proxy that serves 1,024 (--max-clients 1025: 1,024 of
 * ours and the aftermath's background client). The 3,976 extras get
 * TOO_MANY_CLIENTS, counted in
 * lunar_proxy_rejected_connections_total{reason="too_many_clients"}; the
 * first 1,024 keep working; the proxy never runs out of descriptors; and
 * once they all close, the harness's aftermath holds. The test raises its
 * own RLIMIT_NOFILE (each client holds three descriptors) and scales the
 * numbers down, saying so, when the hard limit is too low. make chaos only.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tests/integration/case_util.h"
#include "tests/integration/harness_after.h"

#define WANT_SERVED 1024
#define WANT_TOTAL  5000
#define FDS_EACH    3 /* socket, region memfd, eventfd */

static char sock[PATH_MAX];
static struct h_proc *proxy;
static int http;
static struct h_after after;
static unsigned served = WANT_SERVED, total = WANT_TOTAL;

/* The proxy's open-files limit, from /proc/<pid>/limits; -1 if unread. */
static long proxy_nofile(void)
{
	char path[64], line[256];
	long soft = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/limits", (int)proxy->pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "Max open files", 14))
			soft = strtol(line + 26, NULL, 10);
	if (f)
		fclose(f);
	return soft;
}

static int setup(void **state)
{
	struct rlimit rl;
	char maxc[16];

	if (case_setup(state) || getrlimit(RLIMIT_NOFILE, &rl))
		return -1;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < (rlim_t)WANT_SERVED * FDS_EACH + 256) {
		served = (unsigned)((rl.rlim_cur - 256) / FDS_EACH);
		total = served * WANT_TOTAL / WANT_SERVED;
		printf("  scaled down: open files limited to %llu here, so %u clients served of "
		       "%u\n",
		       (unsigned long long)rl.rlim_cur, served, total);
	}
	snprintf(maxc, sizeof(maxc), "%u", served + 1);
	h_named_sock(sock, "storm");
	proxy = track(h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "64MiB",
				    "--max-clients", maxc, "--arena-size", "1MiB", NULL));
	if (!proxy)
		return -1;
	http = http_port_of(proxy);
	return 0;
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	return case_teardown(state);
}

static void test_chaos_connection_storm(void **state)
{
	struct lunar_client **c = calloc(total, sizeof(*c));
	unsigned ok = 0, refused = 0, other = 0;
	long limit;
	int max_fds = 0, first_other = 0;
	char key[64];
	uint64_t t0;

	(void)state;
	H_ASSERT(c != NULL);
	h_after_begin(&after, sock, proxy, http);
	limit = proxy_nofile();
	t0 = h_now_ms();
	for (unsigned i = 0; i < total; i++) {
		int rc = 0;

		c[i] = h_client_try(sock, 5000, &rc);
		if (c[i])
			ok++;
		else if (rc == LUNAR_ERR_TOO_MANY_CLIENTS)
			refused++;
		else if (other++ == 0)
			first_other = rc;
		H_ASSERT_MSG(!c[i] || i < served, "client %u let in past the limit", i);
		if (i % 250 == 0) {
			int fds = h_pid_fd_count(proxy->pid);

			max_fds = fds > max_fds ? fds : max_fds;
		}
	}
	printf("  %u clients in %llu ms: %u served, %u TOO_MANY_CLIENTS, %u other (first %d); "
	       "proxy: at most %d descriptors of %ld\n",
	       total, (unsigned long long)(h_now_ms() - t0), ok, refused, other, first_other,
	       max_fds, limit);
	H_ASSERT_EQ(ok, served);
	H_ASSERT_EQ(refused, total - served);
	H_ASSERT_EQ(other, 0);
	H_ASSERT(limit < 0 || max_fds < limit);
	H_ASSERT_EQ(h_metric_sum(http, "lunar_proxy_rejected_connections_total{reason=\""
				       "too_many_clients\"}"),
		    total - served);
	/* The first ones keep working. */
	for (unsigned i = 0; i < served; i++) {
		snprintf(key, sizeof(key), "storm/%u", i);
		H_ASSERT_EQ(lunar_put(c[i], key, key, strlen(key), NULL), 0);
		H_ASSERT_EQ(lunar_exists(c[i], key), 1);
		H_ASSERT_EQ(lunar_remove(c[i], key, 1), 0);
	}
	for (unsigned i = 0; i < served; i++)
		lunar_close(c[i]);
	free(c);
	h_after_end(&after);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_chaos_connection_storm, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
