/*
 * test_copyout.c - copying a staged get out while it lands (shmlib/copyout.h):
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

#include "shmlib/copyout.h"

#define LEN SHM_COPYOUT_MIN

struct rig {
	uint8_t *src;
	uint8_t *dst; /* malloc'd to LEN exactly: an overrun is caught */
	struct shm_copyout d;
};

static void rig_init(struct rig *r)
{
	r->src = malloc(LEN);
	r->dst = calloc(1, LEN);
	assert_non_null(r->src);
	assert_non_null(r->dst);
	for (size_t i = 0; i < LEN; i++)
		r->src[i] = (uint8_t)(i * 7 + 1);
	assert_ptr_equal(shm_copyout_init(&r->d, r->src, r->dst, LEN), &r->d);
}

static void test_copyout_copies_what_landed_once(void **state)
{
	struct rig r;

	(void)state;
	rig_init(&r);
	assert_int_equal(shm_copyout_step(&r.d, 0), 0); /* the client's "nothing yet" */
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(5, 1, 0)), 0);
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(5, 1, 1000)), 1);
	assert_int_equal(r.d.copied, 1000);
	assert_memory_equal(r.dst, r.src, 1000);
	assert_int_equal(r.dst[1000], 0);
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(5, 1, 1000)), 0);
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(5, 1, 600)), 0); /* never back */
	assert_int_equal(r.d.copied, 1000);
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(5, 1, LEN)), 1);
	assert_memory_equal(r.dst, r.src, LEN);
	assert_int_equal(shm_copyout_kept(&r.d, lc_landed_pack(5, 1, LEN)), LEN);
	free(r.src);
	free(r.dst);
}

/* A word past the buffer copies the buffer, no more (ASan sees an overrun). */
static void test_copyout_clamps_to_the_buffer(void **state)
{
	struct rig r;

	(void)state;
	rig_init(&r);
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(1, 1, LC_LANDED_BYTES_MASK)), 1);
	assert_int_equal(r.d.copied, LEN);
	assert_memory_equal(r.dst, r.src, LEN);
	assert_int_equal(shm_copyout_kept(&r.d, lc_landed_pack(1, 1, LC_LANDED_BYTES_MASK)), LEN);
	free(r.src);
	free(r.dst);
}

/* Another attempt's word: what was copied no longer counts. */
static void test_copyout_new_attempt_starts_over(void **state)
{
	struct rig r;

	(void)state;
	rig_init(&r);
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(1, 1, 2000)), 1);
	memset(r.src, 0xee, LEN); /* the second attempt's bytes */
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(2, 1, 0)), 0);
	assert_int_equal(r.d.copied, 0);
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(2, 1, 100)), 1);
	assert_int_equal(r.d.copied, 100);
	assert_int_equal(r.dst[99], 0xee);
	assert_int_equal(r.dst[100], (uint8_t)(100 * 7 + 1)); /* the first's, not yet again */
	free(r.src);
	free(r.dst);
}

/* At the end only the final attempt's bytes are kept, up to what it said. */
static void test_copyout_keeps_only_the_final_attempt(void **state)
{
	struct rig r;

	(void)state;
	rig_init(&r);
	assert_int_equal(shm_copyout_kept(&r.d, lc_landed_pack(0, 1, 0)), 0); /* nothing copied */
	assert_int_equal(shm_copyout_step(&r.d, lc_landed_pack(3, 1, 3000)), 1);
	assert_int_equal(shm_copyout_kept(&r.d, lc_landed_pack(4, 1, 0)), 0);
	assert_int_equal(shm_copyout_kept(&r.d, lc_landed_pack(4, 1, LEN)), 0);
	assert_int_equal(shm_copyout_kept(&r.d, lc_landed_pack(3, 1, 3000)), 3000);
	assert_int_equal(shm_copyout_kept(&r.d, lc_landed_pack(3, 1, 1000)), 1000);
	assert_int_equal(shm_copyout_kept(&r.d, lc_landed_pack(3, 1, LEN)), 3000);
	free(r.src);
	free(r.dst);
}

static void test_copyout_word_packs_gen_tells_and_bytes(void **state)
{
	uint64_t w = lc_landed_pack(0xabcdef, 1, LC_LANDED_BYTES_MASK);

	(void)state;
	assert_int_equal(lc_landed_gen(w), 0xabcdef);
	assert_true(lc_landed_tells(w));
	assert_int_equal(lc_landed_bytes(w), LC_LANDED_BYTES_MASK);
	w = lc_landed_pack(7, 0, LC_LANDED_BYTES_MASK + 1); /* bytes masked */
	assert_int_equal(lc_landed_gen(w), 7);
	assert_false(lc_landed_tells(w));
	assert_int_equal(lc_landed_bytes(w), 0);
	assert_int_equal(LC_LANDED_BYTES_MASK + 1, 1ull << 39); /* 512 GiB, past any value */
}

/* A buffer under SHM_COPYOUT_MIN is copied at DONE: no copy-out set up. */
static void test_copyout_small_buffers_wait_for_done(void **state)
{
	struct shm_copyout d;
	uint8_t b[8];

	(void)state;
	assert_null(shm_copyout_init(&d, b, b, SHM_COPYOUT_MIN - 1));
	assert_ptr_equal(shm_copyout_init(&d, b, b, SHM_COPYOUT_MIN), &d);
	assert_int_equal(d.copied + d.kept + d.gen, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_copyout_copies_what_landed_once),
	    cmocka_unit_test(test_copyout_clamps_to_the_buffer),
	    cmocka_unit_test(test_copyout_new_attempt_starts_over),
	    cmocka_unit_test(test_copyout_keeps_only_the_final_attempt),
	    cmocka_unit_test(test_copyout_word_packs_gen_tells_and_bytes),
	    cmocka_unit_test(test_copyout_small_buffers_wait_for_done),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
