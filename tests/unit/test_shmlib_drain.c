/*
 * test_shmlib_drain.c - a staged get copied out while it lands, against a
 * fake proxy (test_shmlib_fake.h) that tells a value's bytes in steps in
 * the completion slot: the waiter copies what landed before DONE (bytes
 * the fake scribbles over after telling them still arrive right), drops
 * what it copied of an attempt that did not succeed, and copies all again
 * when the final word names an attempt it did not copy from. Synchronous
 * and asynchronous gets alike; each case fails with a waiter that copies
 * only at DONE, or one that trusts every landed byte it copied.
 */
#include "tests/unit/test_shmlib_fake.h"
#include "tests/cmocka_main.h"

/* Over SHM_DRAIN_MIN, within the fake's arena. */
#define VAL (600u << 10)

/* Put VAL bytes, then get them back with the fake landing them as land
 * says, by lunar_get_into or (async) lunar_get_async and lunar_wait. */
static void get_as_it_lands(enum fake_land land, int async)
{
	uint8_t *in = malloc(VAL), *out = calloc(1, VAL);
	struct lunar_pending *p = NULL;
	struct lunar_client *c;

	assert_non_null(in);
	assert_non_null(out);
	F.land = land;
	fake_start(&F);
	c = connect_fake(0);
	fill(in, VAL, 3);
	assert_int_equal(lunar_put(c, "v", in, VAL, NULL), 0);
	if (async) {
		assert_int_equal(lunar_get_async(c, "v", out, VAL, &p), 0);
		assert_int_equal(lunar_wait(p), VAL);
	} else {
		assert_int_equal(lunar_get_into(c, "v", out, VAL), VAL);
	}
	assert_memory_equal(out, in, VAL);
	lunar_close(c);
	fake_stop(&F);
	free(in);
	free(out);
}

static void test_shmlib_drain_keeps_what_it_copied_as_it_landed(void **state)
{
	get_as_it_lands(FAKE_LAND_SCRIBBLED, 0);
}

static void test_shmlib_drain_async_keeps_what_it_copied(void **state)
{
	get_as_it_lands(FAKE_LAND_SCRIBBLED, 1);
}

static void test_shmlib_drain_drops_a_failed_attempt(void **state)
{
	get_as_it_lands(FAKE_LAND_RETRIED, 0);
}

static void test_shmlib_drain_copies_again_after_an_untold_attempt(void **state)
{
	get_as_it_lands(FAKE_LAND_UNTOLD, 0);
}

static void test_shmlib_drain_async_copies_again_after_an_untold_attempt(void **state)
{
	get_as_it_lands(FAKE_LAND_UNTOLD, 1);
}

/* A fake that tells nothing: the bytes are copied at DONE, as before. */
static void test_shmlib_drain_nothing_told(void **state)
{
	get_as_it_lands(FAKE_LAND_AT_ONCE, 0);
}

LUNAR_TEST_MAIN_EACH(setup, teardown, test_shmlib_drain_keeps_what_it_copied_as_it_landed,
		     test_shmlib_drain_async_keeps_what_it_copied,
		     test_shmlib_drain_drops_a_failed_attempt,
		     test_shmlib_drain_copies_again_after_an_untold_attempt,
		     test_shmlib_drain_async_copies_again_after_an_untold_attempt,
		     test_shmlib_drain_nothing_told)
