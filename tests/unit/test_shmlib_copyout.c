/*
 * test_shmlib_copyout.c - a staged get copied out while it lands, against a
 * fake proxy (test_shmlib_fake.h) that says it tells (LC_WELCOME_LANDED)
 * and tells a value's bytes in steps in the completion slot: the waiter
 * copies what landed before DONE (bytes the fake scribbles over after
 * telling them still arrive right), drops what it copied of an attempt
 * that did not succeed, and copies all again when the final word names an
 * attempt it did not copy from, synchronous and asynchronous gets alike;
 * each of these fails with a waiter that copies only at DONE, or one that
 * trusts every landed byte it copied. A waiter sleeps as usual instead
 * when the attempt will tell nothing, when no attempt begins, when one
 * that tells lands nothing for a while, when the proxy did not say it
 * tells, and beside another request in flight.
 */
#include "tests/unit/test_shmlib_fake.h"
#include "tests/cmocka_main.h"

/* Over SHM_COPYOUT_MIN, within the fake's arena. */
#define VAL (600u << 10)

static uint8_t *value_put(struct lunar_client *c)
{
	uint8_t *in = malloc(VAL);

	assert_non_null(in);
	fill(in, VAL, 3);
	assert_int_equal(lunar_put(c, "v", in, VAL, NULL), 0);
	return in;
}

/* Put VAL bytes, then get them back with the fake landing them as land
 * says, by lunar_get_into or (async) lunar_get_async and lunar_wait; the
 * fake welcomes with flags. */
static void get_as_it_lands(enum fake_land land, int async, uint16_t flags)
{
	uint8_t *in, *out = calloc(1, VAL);
	struct lunar_pending *p = NULL;
	struct lunar_client *c;

	assert_non_null(out);
	F.land = land;
	F.welcome_flags = flags;
	fake_start(&F);
	c = connect_fake(0);
	in = value_put(c);
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

static void test_shmlib_copyout_keeps_what_it_copied_as_it_landed(void **state)
{
	get_as_it_lands(FAKE_LAND_SCRIBBLED, 0, LC_WELCOME_LANDED);
}

static void test_shmlib_copyout_async_keeps_what_it_copied(void **state)
{
	get_as_it_lands(FAKE_LAND_SCRIBBLED, 1, LC_WELCOME_LANDED);
}

static void test_shmlib_copyout_drops_a_failed_attempt(void **state)
{
	get_as_it_lands(FAKE_LAND_RETRIED, 0, LC_WELCOME_LANDED);
}

static void test_shmlib_copyout_copies_again_after_an_untold_attempt(void **state)
{
	get_as_it_lands(FAKE_LAND_UNTOLD, 0, LC_WELCOME_LANDED);
}

static void test_shmlib_copyout_async_copies_again_after_an_untold_attempt(void **state)
{
	get_as_it_lands(FAKE_LAND_UNTOLD, 1, LC_WELCOME_LANDED);
}

/* A fake that tells nothing: the bytes are copied at DONE, as before. */
static void test_shmlib_copyout_nothing_told(void **state)
{
	get_as_it_lands(FAKE_LAND_AT_ONCE, 0, LC_WELCOME_LANDED);
}

/* A get while the fake stores word (0: none), welcoming with flags: the
 * waiter must go to sleep before DONE, and the bytes arrive. */
static void get_sleeps(uint16_t flags, uint64_t word)
{
	F.land_word = word;
	get_as_it_lands(FAKE_LAND_QUIET, 0, flags);
	assert_true(F.land_slept);
}

/* An attempt that will not tell its bytes (a local copy, a disk read). */
static void test_shmlib_copyout_sleeps_through_an_untelling_attempt(void **state)
{
	get_sleeps(LC_WELCOME_LANDED, lc_landed_pack(1, 0, 0));
}

/* No attempt within SHM_COPYOUT_START_NS (the request waits its turn). */
static void test_shmlib_copyout_sleeps_when_no_attempt_begins(void **state)
{
	get_sleeps(LC_WELCOME_LANDED, 0);
}

/* An attempt that tells, then lands nothing for SHM_COPYOUT_STALL_NS (a
 * stalled peer, or a transport that does not tell after all). */
static void test_shmlib_copyout_sleeps_when_landing_stalls(void **state)
{
	get_sleeps(LC_WELCOME_LANDED, lc_landed_pack(1, 1, 0));
}

/* A proxy that did not say it tells: its slot word is not watched. */
static void test_shmlib_copyout_needs_the_proxy_to_say_it_tells(void **state)
{
	get_sleeps(0, lc_landed_pack(1, 1, 0));
}

/* A small get in flight beside a large one: the large one's waiter does
 * not copy before DONE, so it reads the bytes the fake scribbled over after
 * telling them. */
static void test_shmlib_copyout_not_beside_another_request(void **state)
{
	uint8_t *in, *out = calloc(1, VAL), small[4096], back[4096];
	struct lunar_pending *big, *other;
	struct lunar_client *c;

	assert_non_null(out);
	F.land = FAKE_LAND_SCRIBBLED;
	F.welcome_flags = LC_WELCOME_LANDED;
	fake_start(&F);
	c = connect_fake(0);
	in = value_put(c);
	fill(small, sizeof(small), 4);
	assert_int_equal(lunar_put(c, "s", small, sizeof(small), NULL), 0);
	assert_int_equal(lunar_get_async(c, "v", out, VAL, &big), 0);
	assert_int_equal(lunar_get_async(c, "s", back, sizeof(back), &other), 0);
	assert_int_equal(lunar_wait(big), VAL);
	for (size_t k = 0; k < VAL / 2; k++)
		assert_int_equal(out[k], in[k] ^ 0x5a);
	assert_memory_equal(out + VAL / 2, in + VAL / 2, VAL - VAL / 2);
	assert_int_equal(lunar_wait(other), sizeof(back));
	assert_memory_equal(back, small, sizeof(small));
	lunar_close(c);
	fake_stop(&F);
	free(in);
	free(out);
}

LUNAR_TEST_MAIN_EACH(setup, teardown, test_shmlib_copyout_keeps_what_it_copied_as_it_landed,
		     test_shmlib_copyout_async_keeps_what_it_copied,
		     test_shmlib_copyout_drops_a_failed_attempt,
		     test_shmlib_copyout_copies_again_after_an_untold_attempt,
		     test_shmlib_copyout_async_copies_again_after_an_untold_attempt,
		     test_shmlib_copyout_nothing_told,
		     test_shmlib_copyout_sleeps_through_an_untelling_attempt,
		     test_shmlib_copyout_sleeps_when_landing_stalls,
		     test_shmlib_copyout_sleeps_when_no_attempt_begins,
		     test_shmlib_copyout_needs_the_proxy_to_say_it_tells,
		     test_shmlib_copyout_not_beside_another_request)
