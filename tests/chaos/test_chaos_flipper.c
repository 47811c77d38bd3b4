/*
 * test_chaos_flipper.c - the descriptor flipper of
 * tests/integration/flipper.h for minutes ($FLIP_SECONDS, default 180):
 * requests submitted on a raw client while a second thread flips their
 * shared-memory descriptors, clients cut off and connecting again thousands
 * of times; the proxy survives, client B never fails, a new client is
 * served and the proxy's descriptors come back. make chaos only (make test
 * runs the short one, test_hostile_flipper.c, under make asan and make
 * tsan too); `make asan SAN_GOAL=chaos` (or tsan) runs this one under a
 * sanitizer.
 */
#include "tests/integration/flipper.h"
#include "tests/cmocka_main.h"

static void test_chaos_flipper_minutes(void **state)
{
	(void)state;
	flip_run(flip_seconds(180));
}

LUNAR_TEST_MAIN(flip_setup, teardown, test_chaos_flipper_minutes)
