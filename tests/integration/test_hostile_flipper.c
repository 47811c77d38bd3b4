/*
 * test_hostile_flipper.c - the descriptor flipper of flipper.h for a few
 * seconds ($FLIP_SECONDS, default 8): one thread submits well-formed
 * requests on a raw client while another keeps flipping their descriptors
 * in shared memory; every request is answered or its client cut off, the
 * proxy survives (with no sanitizer report under make asan and make tsan),
 * client B running throughout never fails, and a new client is served.
 * make chaos runs it for minutes (tests/chaos/test_chaos_flipper.c).
 */
#include "flipper.h"
#include "tests/cmocka_main.h"

static void test_hostile_flipper_seconds(void **state)
{
	(void)state;
	flip_run(flip_seconds(8));
}

LUNAR_TEST_MAIN(flip_setup, teardown, test_hostile_flipper_seconds)
