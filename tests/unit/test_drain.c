/*
 * test_drain.c - copying a staged get out while it lands (shmlib/drain.h):
 * landed bytes are copied once and in place, clamped to the buffer
 * whatever the word says; a new attempt starts the copy over; and what was
 * copied is kept at the end only when the final word names the attempt it
 * came from.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "shmlib/drain.h"

#define LEN 4096

struct rig {
	uint8_t src[LEN];
	uint8_t *dst; /* malloc'd to LEN exactly: an overrun is caught */
	struct shm_drain d;
};

static void rig_init(struct rig *r)
{
	for (size_t i = 0; i < LEN; i++)
		r->src[i] = (uint8_t)(i * 7 + 1);
	r->dst = calloc(1, LEN);
	assert_non_null(r->dst);
	r->d = (struct shm_drain){.src = r->src, .dst = r->dst, .len = LEN};
}

static void test_drain_copies_what_landed_once(void **state)
{
	struct rig r;

	(void)state;
	rig_init(&r);
	assert_int_equal(shm_drain_step(&r.d, 0), 0); /* the client's "nothing yet" */
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(5, 0)), 0);
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(5, 1000)), 1);
	assert_int_equal(r.d.copied, 1000);
	assert_memory_equal(r.dst, r.src, 1000);
	assert_int_equal(r.dst[1000], 0);
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(5, 1000)), 0);
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(5, 600)), 0); /* never back */
	assert_int_equal(r.d.copied, 1000);
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(5, LEN)), 1);
	assert_memory_equal(r.dst, r.src, LEN);
	assert_int_equal(shm_drain_kept(&r.d, lc_landed_pack(5, LEN)), LEN);
	free(r.dst);
}

/* A word past the buffer copies the buffer, no more (ASan sees an overrun). */
static void test_drain_clamps_to_the_buffer(void **state)
{
	struct rig r;

	(void)state;
	rig_init(&r);
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(1, LC_LANDED_BYTES_MASK)), 1);
	assert_int_equal(r.d.copied, LEN);
	assert_memory_equal(r.dst, r.src, LEN);
	assert_int_equal(shm_drain_kept(&r.d, lc_landed_pack(1, LC_LANDED_BYTES_MASK)), LEN);
	free(r.dst);
}

/* Another attempt's word: what was copied no longer counts. */
static void test_drain_new_attempt_starts_over(void **state)
{
	struct rig r;

	(void)state;
	rig_init(&r);
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(1, 2000)), 1);
	memset(r.src, 0xee, LEN); /* the second attempt's bytes */
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(2, 0)), 0);
	assert_int_equal(r.d.copied, 0);
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(2, 100)), 1);
	assert_int_equal(r.d.copied, 100);
	assert_int_equal(r.dst[99], 0xee);
	assert_int_equal(r.dst[100], (uint8_t)(100 * 7 + 1)); /* the first's, not yet again */
	free(r.dst);
}

/* At the end only the final attempt's bytes are kept, up to what it said. */
static void test_drain_keeps_only_the_final_attempt(void **state)
{
	struct rig r;

	(void)state;
	rig_init(&r);
	assert_int_equal(shm_drain_kept(&r.d, lc_landed_pack(0, 0)), 0); /* nothing drained */
	assert_int_equal(shm_drain_step(&r.d, lc_landed_pack(3, 3000)), 1);
	assert_int_equal(shm_drain_kept(&r.d, lc_landed_pack(4, 0)), 0);
	assert_int_equal(shm_drain_kept(&r.d, lc_landed_pack(4, LEN)), 0);
	assert_int_equal(shm_drain_kept(&r.d, lc_landed_pack(3, 3000)), 3000);
	assert_int_equal(shm_drain_kept(&r.d, lc_landed_pack(3, 1000)), 1000);
	assert_int_equal(shm_drain_kept(&r.d, lc_landed_pack(3, LEN)), 3000);
	free(r.dst);
}

static void test_drain_word_packs_gen_and_bytes(void **state)
{
	uint64_t w = lc_landed_pack(0xabcdef, (1ull << 40) - 1);

	(void)state;
	assert_int_equal(lc_landed_gen(w), 0xabcdef);
	assert_int_equal(lc_landed_bytes(w), (1ull << 40) - 1);
	assert_int_equal(lc_landed_gen(lc_landed_pack(7, 1ull << 40)), 7); /* bytes masked */
	assert_int_equal(lc_landed_bytes(lc_landed_pack(7, 1ull << 40)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_drain_copies_what_landed_once),
	    cmocka_unit_test(test_drain_clamps_to_the_buffer),
	    cmocka_unit_test(test_drain_new_attempt_starts_over),
	    cmocka_unit_test(test_drain_keeps_only_the_final_attempt),
	    cmocka_unit_test(test_drain_word_packs_gen_and_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
