/*
 * test_spin.c - the waiter's spin budget (shmlib/spin.h): it follows how
 * long the session's requests take by the proxy's completion stamps, stops
 * spinning for slow sessions, and spins again once requests are fast again,
 * also when every sample in between came while the waiter slept;
 * whether a waiter spins or yields (shm_should_spin); and how many of its
 * CPUs the proxy's loop leaves it (shm_spare_cpus).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "shmlib/spin.h"
#include "tests/cmocka_main.h"

/* n requests that each took took_ns by the proxy's stamp. */
static uint32_t feed(uint32_t lat, unsigned n, uint64_t took_ns)
{
	uint64_t t = 1000000000ull;

	for (unsigned i = 0; i < n; i++, t += 1000000ull)
		lat = shm_lat_update(lat, t, t + took_ns);
	return lat;
}

static void test_spin_follows_fast_requests(void **state)
{
	uint32_t lat = feed(10000, 64, 6000);

	assert_in_range(lat, 5500, 6500);
	assert_in_range(shm_spin_budget(lat), 11000, 13000);
}

static void test_spin_probes_only_for_slow_sessions(void **state)
{
	uint32_t lat = feed(10000, 64, 400000); /* slower than a cluster put (two RPCs) */

	assert_int_equal(shm_spin_budget(lat), SHM_SPIN_MIN_NS);
}

static void test_spin_recovers_when_requests_speed_up(void **state)
{
	/* Slow, then fast again: each fast request outlasts the probe, so the
	 * waiter sleeps through it, yet its stamp shows the request was fast. */
	uint32_t lat = feed(10000, 64, 400000);

	lat = feed(lat, 64, 4000);
	assert_true(shm_spin_budget(lat) >= 2 * 4000 - 500);
	assert_true(shm_spin_budget(lat) <= SHM_SPIN_MAX_NS);
}

static void test_spin_budget_bounds(void **state)
{
	assert_int_equal(shm_spin_budget(0), SHM_SPIN_MIN_NS);
	assert_int_equal(shm_spin_budget(SHM_SPIN_MAX_NS / 2), SHM_SPIN_MAX_NS);
	assert_int_equal(shm_spin_budget(SHM_SPIN_MAX_NS / 2 + 1), SHM_SPIN_MIN_NS);
	assert_int_equal(shm_spin_budget(UINT32_MAX), SHM_SPIN_MIN_NS);
}

static void test_spin_stamp_is_only_a_hint(void **state)
{
	/* A stamp before the submit counts as no time; one far after it as the
	 * longest: neither wraps the average. */
	assert_int_equal(shm_lat_update(8000, 5000, 1000), 7000);
	assert_int_equal(shm_lat_update(0, 0, UINT64_MAX), UINT32_MAX / 8);
	assert_int_equal(shm_lat_update(UINT32_MAX, 0, UINT64_MAX),
			 UINT32_MAX - UINT32_MAX / 8 + UINT32_MAX / 8);
}

/* shm_should_spin for watching threads of a session with spare CPUs. */
static int spins(uint32_t watching, uint32_t spare_cpus, int crowded, uint32_t lat_ns)
{
	struct shm_waiters w = {.watching = watching, .spare_cpus = spare_cpus, .crowded = crowded};

	return shm_should_spin(w, lat_ns);
}

static void test_spin_while_a_cpu_is_spare(void **state)
{
	/* Slow requests: spin only on a spare CPU the proxy leaves free. */
	assert_true(spins(0, 1, 0, 50000));
	assert_false(spins(1, 1, 0, 50000));
	assert_true(spins(2, 3, 0, 50000));
	assert_false(spins(3, 3, 0, 50000));
	assert_false(spins(0, 1, 1, 50000)); /* crowded */
}

static void test_spin_for_short_requests_however_many_watch(void **state)
{
	/* Requests faster than a thread switch: every waiter spins, also past
	 * the spare CPUs and when crowded; from the threshold on they yield. */
	assert_true(spins(7, 1, 0, 1200));
	assert_true(spins(63, 1, 1, SHM_SHORT_WAIT_NS - 1));
	assert_false(spins(7, 1, 0, SHM_SHORT_WAIT_NS));
	assert_false(spins(7, 1, 1, 5000));
}

static void test_spin_short_requests_keep_short_budgets(void **state)
{
	/* Spinning past the spare CPUs is safe only because such spins are
	 * short: a budget of at most twice the threshold. */
	assert_true(shm_spin_budget(SHM_SHORT_WAIT_NS - 1) <= 2 * SHM_SHORT_WAIT_NS);
	assert_true(shm_spin_budget(0) <= 2 * SHM_SHORT_WAIT_NS);
}

static void test_spin_none_without_a_spare_cpu(void **state)
{
	/* One CPU: the proxy needs it, however fast its requests are. */
	assert_false(spins(0, 0, 0, 0));
	assert_false(spins(0, 0, 0, 50000));
}

/* shm_spare_cpus for a thread allowed the n CPUs first..first+n-1. */
static uint32_t spare(int first, int n, uint32_t loop_cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (int i = first; i < first + n; i++)
		CPU_SET(i, &set);
	return shm_spare_cpus(&set, (uint32_t)n, loop_cpu);
}

static void test_spin_spare_cpus_beside_the_loop(void **state)
{
	/* The loop on one of the thread's CPUs (hint: CPU + 1) takes one. */
	assert_int_equal(spare(0, 2, 1), 1);
	assert_int_equal(spare(0, 2, 2), 1);
	assert_int_equal(spare(0, 1, 1), 0);
	/* A loop on a CPU of its own leaves every one of the thread's. */
	assert_int_equal(spare(0, 1, 2), 1);
	assert_int_equal(spare(4, 4, 1), 4);
	assert_int_equal(spare(0, 4, 9), 4);
}

static void test_spin_spare_cpus_unknown_loop_is_ours(void **state)
{
	/* No hint, or one no CPU set holds (a client scribbling over its own
	 * ring): the loop may be on any of ours. */
	assert_int_equal(spare(0, 2, 0), 1);
	assert_int_equal(spare(0, 1, 0), 0);
	assert_int_equal(spare(0, 2, CPU_SETSIZE + 1), 1);
	assert_int_equal(spare(0, 2, CPU_SETSIZE), 2); /* the last CPU a set holds */
	assert_int_equal(spare(0, 2, UINT32_MAX), 1);
	assert_int_equal(spare(0, 0, 0), 0);
}

static void test_spin_learns_each_op_apart(void **state)
{
	/* Slow puts do not stop fast gets from spinning, nor the reverse. */
	uint32_t lat[LC_OP_MAX] = {0};
	uint32_t *put = shm_lat_of(lat, LC_OP_PUT), *get = shm_lat_of(lat, LC_OP_GET);

	assert_ptr_not_equal(put, get);
	*put = feed(*put, 64, 40000);
	*get = feed(*get, 64, 1000);
	assert_false(spins(7, 1, 0, *put));
	assert_true(spins(7, 1, 0, *get));
	assert_ptr_equal(shm_lat_of(lat, LC_OP_MAX), &lat[0]);
	assert_ptr_equal(shm_lat_of(lat, UINT16_MAX), &lat[0]);
}

LUNAR_TEST_MAIN(NULL, NULL, test_spin_follows_fast_requests,
		test_spin_probes_only_for_slow_sessions, test_spin_recovers_when_requests_speed_up,
		test_spin_budget_bounds, test_spin_stamp_is_only_a_hint,
		test_spin_while_a_cpu_is_spare, test_spin_for_short_requests_however_many_watch,
		test_spin_short_requests_keep_short_budgets, test_spin_none_without_a_spare_cpu,
		test_spin_spare_cpus_beside_the_loop, test_spin_spare_cpus_unknown_loop_is_ours,
		test_spin_learns_each_op_apart)
