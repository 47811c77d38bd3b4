/*
 * test_step3_busy_syscalls.c - a busy path makes no system calls (Step 3):
 * while one client thread calls exists and get back to back, the proxy
 * drains its ring without entering the kernel, looking at its sockets only
 * every 100 µs. Counted by perf on the raw_syscalls:sys_enter tracepoint of
 * the proxy's process: fewer than one system call per four client calls
 * (about 0.07 here; the loop that looked at its sockets between every two
 * polls of the rings made about 3 a call).
 * Skipped, with the reason, where perf cannot count that tracepoint.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define BUSY_MS 700
#define VALUE	4096

static char sock[PATH_MAX];
static struct h_proc *proxy;

/* The count a `perf stat -x,` run wrote to out_path, or -1. */
static long long perf_count(const char *out_path)
{
	char line[512];
	long long n = -1;
	FILE *f = fopen(out_path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "raw_syscalls:sys_enter") && line[0] >= '0' && line[0] <= '9')
			n = strtoll(line, NULL, 10);
	fclose(f);
	return n;
}

static void test_busy_path_makes_no_syscalls(void **state)
{
	char cmd[PATH_MAX * 2], out[PATH_MAX], buf[VALUE];
	struct lunar_client *c;
	long long calls = 0, syscalls;
	uint64_t end;
	FILE *perf;

	(void)state;
	snprintf(out, sizeof(out), "%s", h_path("perf.txt"));
	snprintf(cmd, sizeof(cmd),
		 "perf stat -x, -e raw_syscalls:sys_enter -p %d -o %s -- sleep 0.1 >/dev/null 2>&1",
		 (int)proxy->pid, out);
	if (system(cmd) != 0 || perf_count(out) < 0) {
		printf("skipped: perf cannot count raw_syscalls:sys_enter here (no perf, no "
		       "tracefs, or no permission)\n");
		skip();
	}
	c = h_client(sock);
	H_ASSERT(c);
	h_fill(buf, sizeof(buf), 7);
	H_ASSERT_EQ(lunar_put(c, "busy", buf, sizeof(buf), NULL), 0);
	for (int i = 0; i < 1000; i++) /* warm: the spin budget learns */
		H_ASSERT_EQ(lunar_exists(c, "busy"), 1);

	snprintf(cmd, sizeof(cmd),
		 "perf stat -x, -e raw_syscalls:sys_enter -p %d -o %s -- sleep 1 >/dev/null 2>&1",
		 (int)proxy->pid, out);
	perf = popen(cmd, "r");
	H_ASSERT(perf);
	h_sleep_ms(150); /* perf attached */
	end = h_now_ms() + BUSY_MS;
	while (h_now_ms() < end) {
		H_ASSERT_EQ(lunar_exists(c, "busy"), 1);
		H_ASSERT_EQ(lunar_get_into(c, "busy", buf, sizeof(buf)), VALUE);
		calls += 2;
	}
	H_ASSERT_EQ(pclose(perf), 0);
	syscalls = perf_count(out);
	printf("  %lld calls in %d ms; the proxy made %lld system calls in 1 s (%.3f a call)\n",
	       calls, BUSY_MS, syscalls, (double)syscalls / (double)calls);
	H_ASSERT(syscalls >= 0);
	H_ASSERT_MSG(syscalls * 4 < calls, "the proxy made %lld system calls for %lld calls",
		     syscalls, calls);
	lunar_close(c);
}

static int setup(void **state)
{
	(void)state;
	if (h_init() != 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	proxy = h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	return proxy ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	h_cleanup();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_busy_path_makes_no_syscalls),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
