/*
 * test_step3_wait_hints.c - the hints a lunar-proxy writes into every
 * client's ring for how its threads wait (shm-abi.md, Completing):
 *  - loop_cpu names the CPU the loop runs on (plus one), so a would-be
 *    spinner on that CPU sleeps (and may be woken elsewhere) instead;
 *  - crowded turns on while more clients are busy than there are CPUs
 *    beside the loop (each waiter then yields between looks), and off when
 *    they go quiet;
 *  - a client that overwrites its own hints is still served, and never
 *    changes what another client is told; the proxy never reads them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include "atomic.h"
#include "cpus.h"
#include "harness.h"
#include "harness_raw.h"

#define MAX_RAW 16

static char sock[PATH_MAX];

/* One HEALTH request on each of c[0..n) at once, then wait for them all. */
static void round_of_health(struct raw *c, unsigned n, uint64_t seq)
{
	for (unsigned i = 0; i < n; i++) {
		struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = 0, .seq = seq};

		c[i].slots[0].state = LC_SLOT_PENDING;
		raw_submit(&c[i], &q);
	}
	for (unsigned i = 0; i < n; i++)
		H_ASSERT_MSG(raw_wait_done(&c[i], 0, 5000), "HEALTH on client %u never completed", i);
}

/* c's crowded hint once it equals want, or its value after ms: the loop
 * reassesses just after completing a request, so the hint may trail. */
static uint32_t crowded_within(const struct raw *c, uint32_t want, unsigned ms)
{
	uint64_t end = h_now_ms() + ms;
	uint32_t v;

	while ((v = LC_READ_ONCE(c->ring->crowded)) != want && h_now_ms() < end)
		h_sleep_ms(1);
	return v;
}

static void test_wait_hints(void **state)
{
	/* The proxy is our child, with our CPU affinity. */
	unsigned spare = lc_usable_cpus() - 1, n = spare + 1, rounds = 0;
	struct raw c[MAX_RAW];
	uint32_t cpu;

	(void)state;
	if (n > MAX_RAW) {
		printf("skipped: %u CPUs would need %u raw clients, the test has room for %d\n",
		       spare + 1, n, MAX_RAW);
		skip();
	}
	for (unsigned i = 0; i < n; i++)
		raw_open(&c[i], sock);

	/* Alone, a client learns where the loop runs, and is not crowded
	 * unless the loop has no CPU to spare. */
	round_of_health(c, 1, 1);
	cpu = LC_READ_ONCE(c[0].ring->loop_cpu);
	printf("  loop on CPU %u; %u CPUs beside it\n", cpu - 1, spare);
	H_ASSERT_MSG(cpu >= 1 && cpu < 0xdeadbeefu, "loop_cpu hint %u", cpu);
	H_ASSERT_EQ(crowded_within(&c[0], spare ? 0 : 1, 100), spare ? 0 : 1);
	if (!spare) {
		for (unsigned i = 0; i < n; i++)
			raw_close(&c[i]);
		return; /* one CPU: crowded whenever anyone is busy */
	}

	/* One client scribbles over its hints: it is still served and the
	 * others never see its values. */
	LC_WRITE_ONCE(c[n - 1].ring->crowded, 0xdeadbeefu);
	LC_WRITE_ONCE(c[n - 1].ring->loop_cpu, 0xdeadbeefu);

	/* spare + 1 clients busy together: crowded, told to each of them. */
	while (!LC_READ_ONCE(c[0].ring->crowded) && rounds < 2000)
		round_of_health(c, n, 2 + rounds++);
	printf("  %u busy clients: crowded after %u rounds\n", n, rounds);
	for (unsigned i = 0; i < n; i++) {
		cpu = LC_READ_ONCE(c[i].ring->loop_cpu);
		H_ASSERT_MSG(crowded_within(&c[i], 1, 100) == 1,
			     "client %u of %u busy ones not told the proxy is crowded", i, n);
		H_ASSERT_MSG(cpu >= 1 && cpu < 0xdeadbeefu, "client %u: loop_cpu hint %u", i, cpu);
	}

	/* Quiet for a while, then one client alone: no longer crowded. */
	h_sleep_ms(20);
	round_of_health(c, 1, 6000);
	H_ASSERT_EQ(crowded_within(&c[0], 0, 100), 0);
	for (unsigned i = 0; i < n; i++)
		raw_close(&c[i]);
}

static int setup(void **state)
{
	(void)state;
	if (h_init() != 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	return h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL) ? 0 : -1;
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
		cmocka_unit_test(test_wait_hints),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
