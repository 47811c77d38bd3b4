/*
 * test_spin.c - the waiter's spin budget (shmlib/spin.h): it follows how
 * long the session's requests take by the proxy's completion stamps, stops
 * spinning for slow sessions, and spins again once requests are fast again,
 * also when every sample in between came while the waiter slept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "shmlib/spin.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spin_follows_fast_requests),
		cmocka_unit_test(test_spin_probes_only_for_slow_sessions),
		cmocka_unit_test(test_spin_recovers_when_requests_speed_up),
		cmocka_unit_test(test_spin_budget_bounds),
		cmocka_unit_test(test_spin_stamp_is_only_a_hint),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
