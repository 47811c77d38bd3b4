/*
 * test_bench_modes.c - lunar-bench's measuring modes give their figures:
 * --evict-round evicts exactly ceil(N x 5 %) objects in one round, and
 * --trace --simulate-only counts the trace's unique blocks (skipped without
 * the trace beside the repo).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define TRACE "../shared/traces/synthetic_trace.jsonl"

/* Run cmd; its stdout into out (NUL-terminated); its exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
	FILE *f = popen(cmd, "r");
	size_t n = 0;
	int st;

	if (!f)
		return -1;
	while (n + 1 < cap && fgets(out + n, (int)(cap - n), f))
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_bench_modes_evict_round(void **state)
{
	char cmd[512], out[4096];

	(void)state;
	snprintf(cmd, sizeof(cmd), "timeout 60 %s --evict-round 2000", h_bin("lunar-bench"));
	assert_int_equal(run(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "evicted=100\n"));
	assert_non_null(strstr(out, "eviction_round_ms="));
	snprintf(cmd, sizeof(cmd), "%s --evict-round 2000 --bogus 2>/dev/null", h_bin("lunar-bench"));
	assert_int_equal(run(cmd, out, sizeof(out)), 2);
}

static void test_bench_modes_trace_simulation(void **state)
{
	char cmd[512], out[8192];

	(void)state;
	if (access(TRACE, R_OK)) {
		printf("skipped: no %s beside the repo\n", TRACE);
		skip();
	}
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --trace " TRACE " --block-size 64KiB --simulate-only "
		 "--capacity-ratio 0.1",
		 h_bin("lunar-bench"));
	assert_int_equal(run(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "trace_requests=3993\n"));
	assert_non_null(strstr(out, "trace_unique_blocks=43924\n"));
	assert_non_null(strstr(out, "lru_hit_ratio="));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bench_modes_evict_round),
	    cmocka_unit_test(test_bench_modes_trace_simulation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
