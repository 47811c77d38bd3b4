/*
 * test_ralloc.c - the range allocator: fit, coalescing, exhaustion,
 * alignment, bad frees, and a randomized run checked against a simple model.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ralloc.h"
#include "tests/cmocka_main.h"

static void test_ralloc_bad_arguments(void **state)
{
	/* Given/When: a zero size, a zero or non-power-of-two alignment */
	/* Then: no allocator */
	assert_null(lc_ralloc_create(0, 1));
	assert_null(lc_ralloc_create(1024, 0));
	assert_null(lc_ralloc_create(1024, 3));
	assert_null(lc_ralloc_create(8, 16));
}

static void test_ralloc_fragmentation(void **state)
{
	/* Given: a 1 KiB space cut into eight 128-byte ranges */
	struct lc_ralloc *a = lc_ralloc_create(1024, 1);
	uint64_t off[8], big;

	assert_non_null(a);
	for (int i = 0; i < 8; i++)
		assert_int_equal(lc_ralloc_get(a, 128, &off[i]), 0);
	/* When: every other range is freed */
	for (int i = 0; i < 8; i += 2)
		assert_int_equal(lc_ralloc_put(a, off[i], NULL), 0);
	/* Then: 512 bytes are free but no 256-byte range fits; 128 does */
	assert_int_equal(lc_ralloc_used(a), 512);
	assert_int_equal(lc_ralloc_largest_free(a), 128);
	assert_int_equal(lc_ralloc_get(a, 256, &big), -ENOSPC);
	assert_int_equal(lc_ralloc_get(a, 128, &big), 0);
	assert_int_equal(big % 256, 0);
	lc_ralloc_destroy(a);
}

static void test_ralloc_coalescing(void **state)
{
	/* Given: a space filled with ranges of mixed sizes */
	struct lc_ralloc *a = lc_ralloc_create(1 << 20, 64);
	uint64_t off[64], whole;
	int n = 0;

	assert_non_null(a);
	while (n < 64 && lc_ralloc_get(a, (uint64_t)(n % 7 + 1) * 4000, &off[n]) == 0)
		n++;
	/* When: they are freed in an order that merges left, right and both */
	for (int i = 1; i < n; i += 2)
		assert_int_equal(lc_ralloc_put(a, off[i], NULL), 0);
	for (int i = n - 1 - (n - 1) % 2; i >= 0; i -= 2)
		assert_int_equal(lc_ralloc_put(a, off[i], NULL), 0);
	/* Then: the space is one range again */
	assert_int_equal(lc_ralloc_used(a), 0);
	assert_int_equal(lc_ralloc_largest_free(a), 1 << 20);
	assert_int_equal(lc_ralloc_get(a, 1 << 20, &whole), 0);
	assert_int_equal(whole, 0);
	lc_ralloc_destroy(a);
}

static void test_ralloc_exhaustion(void **state)
{
	/* Given: a space of 4 KiB */
	struct lc_ralloc *a = lc_ralloc_create(4096, 1);
	uint64_t off;

	assert_non_null(a);
	/* When/Then: more than the space fails, the whole space fits once */
	assert_int_equal(lc_ralloc_get(a, 4097, &off), -ENOSPC);
	assert_int_equal(lc_ralloc_get(a, 4096, &off), 0);
	assert_int_equal(lc_ralloc_get(a, 1, &off), -ENOSPC);
	assert_int_equal(lc_ralloc_used(a), 4096);
	assert_int_equal(lc_ralloc_largest_free(a), 0);
	lc_ralloc_destroy(a);
}

static void test_ralloc_alignment(void **state)
{
	/* Given: 4 KiB alignment */
	struct lc_ralloc *a = lc_ralloc_create((1 << 20) + 100, 4096);
	uint64_t off;

	assert_non_null(a);
	/* Then: the capacity drops the partial tail */
	assert_int_equal(lc_ralloc_capacity(a), 1 << 20);
	/* When: odd lengths are allocated */
	for (uint64_t len = 1; len < 20000; len += 3333) {
		uint64_t used = lc_ralloc_used(a), freed = 0;

		assert_int_equal(lc_ralloc_get(a, len, &off), 0);
		/* Then: offsets are aligned and lengths rounded up, as
		 * lc_ralloc_round says and lc_ralloc_put gives back */
		assert_int_equal(off % 4096, 0);
		assert_int_equal(lc_ralloc_round(a, len), (len + 4095) / 4096 * 4096);
		assert_int_equal(lc_ralloc_used(a) - used, lc_ralloc_round(a, len));
		assert_int_equal(lc_ralloc_put(a, off, &freed), 0);
		assert_int_equal(freed, lc_ralloc_round(a, len));
		assert_int_equal(lc_ralloc_get(a, len, &off), 0);
	}
	lc_ralloc_destroy(a);
}

static void test_ralloc_free_unknown(void **state)
{
	/* Given: one allocated range */
	struct lc_ralloc *a = lc_ralloc_create(4096, 16);
	uint64_t off;

	assert_non_null(a);
	assert_int_equal(lc_ralloc_get(a, 100, &off), 0);
	/* When/Then: frees of other offsets, and a double free, are refused */
	assert_int_equal(lc_ralloc_put(a, off + 16, NULL), -ENOENT);
	assert_int_equal(lc_ralloc_put(a, 4000, NULL), -ENOENT);
	assert_int_equal(lc_ralloc_put(a, off, NULL), 0);
	assert_int_equal(lc_ralloc_put(a, off, NULL), -ENOENT);
	lc_ralloc_destroy(a);
}

static void test_ralloc_take_give(void **state)
{
	/* Given: 16-byte alignment, a range taken and one got */
	struct lc_ralloc *a = lc_ralloc_create(4096, 16);
	struct lc_range *h;
	uint64_t off, got;
	int rc = 1;

	uint64_t freed = 0;

	assert_non_null(a);
	h = lc_ralloc_take(a, 100, &off, &rc);
	assert_non_null(h);
	assert_int_equal(rc, 1); /* left alone on success */
	assert_int_equal(lc_ralloc_get(a, 100, &got), 0);
	assert_int_equal(lc_ralloc_used(a), 224);
	/* Then: the taken range is unknown by offset, and a give frees it,
	 * saying its rounded length; a second give is refused */
	assert_int_equal(lc_ralloc_put(a, off, NULL), -ENOENT);
	assert_int_equal(lc_ralloc_give(a, h, &freed), 0);
	assert_int_equal(freed, 112);
	assert_int_equal(lc_ralloc_give(a, h, NULL), -EINVAL);
	assert_int_equal(lc_ralloc_used(a), 112);
	/* And: a take that cannot fit says why */
	assert_null(lc_ralloc_take(a, 4096, &off, &rc));
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(lc_ralloc_put(a, got, NULL), 0);
	assert_int_equal(lc_ralloc_largest_free(a), 4096);
	lc_ralloc_destroy(a);
}

/* The model: a byte map of the space, 1 where allocated. */
#define MODEL_SIZE 65536
struct model_range {
	uint64_t off, len;
	struct lc_range *h; /* from lc_ralloc_take; NULL from lc_ralloc_get */
};

/* Free r the way it was allocated; a taken range is not found by offset. */
static void model_free(struct lc_ralloc *a, const struct model_range *r)
{
	uint64_t freed = 0;

	if (!r->h) {
		assert_int_equal(lc_ralloc_put(a, r->off, NULL), 0);
		return;
	}
	assert_int_equal(lc_ralloc_put(a, r->off, NULL), -ENOENT);
	assert_int_equal(lc_ralloc_give(a, r->h, &freed), 0);
	assert_int_equal(freed, r->len);
}

static int model_has_gap(const unsigned char *map, uint64_t len)
{
	uint64_t run = 0;

	for (uint64_t i = 0; i < MODEL_SIZE; i++) {
		run = map[i] ? 0 : run + 1;
		if (run >= len)
			return 1;
	}
	return 0;
}

static void model_step(struct lc_ralloc *a, unsigned char *map, struct model_range *live, size_t *n)
{
	uint64_t len, off, used = 0;

	if (*n && rand() % 2) {
		size_t i = (size_t)rand() % *n;

		model_free(a, &live[i]);
		memset(map + live[i].off, 0, live[i].len);
		live[i] = live[--*n];
	} else {
		struct lc_range *h = NULL;
		int rc = 0;

		len = (uint64_t)rand() % 3000 + 1;
		if (rand() % 2)
			rc = lc_ralloc_get(a, len, &off);
		else if (!(h = lc_ralloc_take(a, len, &off, &rc)))
			assert_int_not_equal(rc, 0);
		if (rc == 0) {
			assert_true(off + len <= MODEL_SIZE);
			for (uint64_t i = off; i < off + len; i++)
				assert_int_equal(map[i], 0);
			memset(map + off, 1, len);
			live[(*n)++] = (struct model_range){off, len, h};
		} else {
			/* a failure is only allowed when no gap could hold len */
			assert_false(model_has_gap(map, len));
		}
	}
	for (size_t i = 0; i < *n; i++)
		used += live[i].len;
	assert_int_equal(lc_ralloc_used(a), used);
}

static void test_ralloc_random_against_model(void **state)
{
	/* Given: byte alignment so lengths are exact, and a byte-map model */
	struct lc_ralloc *a = lc_ralloc_create(MODEL_SIZE, 1);
	unsigned char *map = calloc(MODEL_SIZE, 1);
	struct model_range *live = calloc(MODEL_SIZE, sizeof(*live));
	size_t n = 0;

	assert_non_null(a);
	assert_non_null(map);
	assert_non_null(live);
	srand(12345);
	/* When: random gets and takes, puts and gives; Then: no overlap, exact
	 * use, no false ENOSPC, and neighbours of either kind merge again */
	for (int step = 0; step < 20000; step++)
		model_step(a, map, live, &n);
	while (n)
		model_free(a, &live[--n]);
	assert_int_equal(lc_ralloc_largest_free(a), MODEL_SIZE);
	free(live);
	free(map);
	lc_ralloc_destroy(a);
}

static void test_ralloc_split(void **state)
{
	/* Given: 16-byte alignment and a 1 KiB range taken */
	struct lc_ralloc *a = lc_ralloc_create(4096, 16);
	struct lc_range *r, *mid, *head, *tail, *m2;
	uint64_t off, freed;
	int rc = 0;

	assert_non_null(a);
	r = lc_ralloc_take(a, 1024, &off, &rc);
	assert_non_null(r);
	/* When: 100 bytes at off + 32 are cut out of it */
	mid = lc_ralloc_split(a, r, off + 32, 100, &head, &tail, &rc);
	/* Then: a head, a middle of 112 and a tail, all still allocated */
	assert_non_null(mid);
	assert_ptr_equal(head, r);
	assert_non_null(tail);
	assert_int_equal(lc_ralloc_used(a), 1024);
	/* And: what lies outside the piece, is unaligned or free is refused */
	assert_null(lc_ralloc_split(a, mid, off + 32, 128, &head, &tail, &rc));
	assert_int_equal(rc, -EINVAL);
	assert_null(lc_ralloc_split(a, tail, off + 145, 16, &head, &tail, &rc));
	assert_int_equal(rc, -EINVAL);
	/* And: a cut at the very start of a piece leaves no head */
	m2 = lc_ralloc_split(a, tail, off + 144, 16, &head, &tail, &rc);
	assert_non_null(m2);
	assert_null(head);
	assert_non_null(tail);
	/* And: each piece frees alone, and all of them free the whole */
	assert_int_equal(lc_ralloc_give(a, mid, &freed), 0);
	assert_int_equal(freed, 112);
	assert_int_equal(lc_ralloc_give(a, r, &freed), 0);
	assert_int_equal(freed, 32);
	assert_int_equal(lc_ralloc_give(a, m2, NULL), 0);
	assert_int_equal(lc_ralloc_give(a, tail, &freed), 0);
	assert_int_equal(freed, 1024 - 160);
	assert_int_equal(lc_ralloc_used(a), 0);
	assert_int_equal(lc_ralloc_largest_free(a), 4096);
	lc_ralloc_destroy(a);
}

static void test_ralloc_million(void **state)
{
	/* Given: room for a million 64-byte ranges */
	const uint64_t n = 1000000;
	struct lc_ralloc *a = lc_ralloc_create(n * 64, 64);
	uint64_t *off = malloc(n * sizeof(*off));

	assert_non_null(a);
	assert_non_null(off);
	/* When: all are allocated, then freed in a scattered order */
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(lc_ralloc_get(a, 64, &off[i]), 0);
	assert_int_equal(lc_ralloc_used(a), n * 64);
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(lc_ralloc_put(a, off[(i * 7919) % n], NULL), 0);
	/* Then: one free range again */
	assert_int_equal(lc_ralloc_largest_free(a), n * 64);
	free(off);
	lc_ralloc_destroy(a);
}

LUNAR_TEST_MAIN(NULL, NULL, test_ralloc_bad_arguments, test_ralloc_fragmentation,
		test_ralloc_coalescing, test_ralloc_exhaustion, test_ralloc_alignment,
		test_ralloc_free_unknown, test_ralloc_take_give, test_ralloc_random_against_model,
		test_ralloc_split, test_ralloc_million)
