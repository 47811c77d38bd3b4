/*
 * test_bench_util.c - the benchmarks' byte checks: --check takes full or
 * sampled only, and a sampled comparison catches what it promises (a
 * differing first word of any 4 KiB, or last word) at any size, and lets a
 * byte between the samples through, which only the verify phase's full
 * comparison is there to catch; poisoning a buffer spoils every sample and
 * nothing else.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "tools/bench/bench.h"
#include "tests/cmocka_main.h"

static void test_bench_util_parse_check(void **state)
{
	enum bench_check c = BENCH_CHECK_SAMPLED;

	(void)state;
	assert_int_equal(bench_parse_check("full", &c), 0);
	assert_int_equal(c, BENCH_CHECK_FULL);
	assert_int_equal(bench_parse_check("sampled", &c), 0);
	assert_int_equal(c, BENCH_CHECK_SAMPLED);
	assert_int_equal(bench_parse_check("Full", &c), -1);
	assert_int_equal(bench_parse_check("", &c), -1);
	assert_int_equal(c, BENCH_CHECK_SAMPLED);
}

/* For a value of len bytes: equal copies pass; flipping a sampled byte
 * fails; flipping the byte just past the first sample passes. */
static void sampled_at(uint64_t len)
{
	unsigned char *want = bench_pattern_alloc(len), *got = malloc(len);

	assert_non_null(want);
	assert_non_null(got);
	memcpy(got, want, len);
	assert_true(bench_sampled_equal(got, want, len));
	for (uint64_t at = 0; at < len; at += 4096) {
		got[at] ^= 1;
		assert_false(bench_sampled_equal(got, want, len));
		got[at] ^= 1;
	}
	got[len - 1] ^= 0x80;
	assert_false(bench_sampled_equal(got, want, len));
	got[len - 1] ^= 0x80;
	if (len > 16) {
		got[8] ^= 1;
		assert_true(bench_sampled_equal(got, want, len));
		assert_int_not_equal(memcmp(got, want, len), 0);
	}
	free(want);
	free(got);
}

static void test_bench_util_sampled_equal(void **state)
{
	(void)state;
	sampled_at(1);
	sampled_at(7);
	sampled_at(8);
	sampled_at(4096);
	sampled_at(4097 + 8);
	sampled_at(65536);
	sampled_at(65536 + 3);
}

/* Poisoning a buffer that holds the right value makes every sampled word
 * wrong and leaves the rest alone, at any size. */
static void poisoned_at(uint64_t len)
{
	unsigned char *want = bench_pattern_alloc(len), *got = malloc(len);

	assert_non_null(want);
	assert_non_null(got);
	memcpy(got, want, len);
	bench_poison_samples(got, want, len);
	assert_false(bench_sampled_equal(got, want, len));
	for (uint64_t at = 0; at + 8 <= len; at += 4096) {
		memcpy(got + at, want + at, 8);
		if (at + 8 < len - 8)
			assert_false(bench_sampled_equal(got, want, len));
	}
	memcpy(got + len - (len < 8 ? len : 8), want + len - (len < 8 ? len : 8),
	       len < 8 ? len : 8);
	assert_true(bench_sampled_equal(got, want, len));
	assert_memory_equal(got, want, len);
	free(want);
	free(got);
}

static void test_bench_util_poison_samples(void **state)
{
	(void)state;
	poisoned_at(1);
	poisoned_at(8);
	poisoned_at(4096);
	poisoned_at(4097 + 8);
	poisoned_at(65536 + 3);
}

/* Another object's value (the pattern's window 8 bytes on) fails even when
 * only one word per page is looked at. */
static void test_bench_util_sampled_other_object(void **state)
{
	unsigned char *pat = bench_pattern_alloc(65536 + 8);

	(void)state;
	assert_non_null(pat);
	assert_false(bench_sampled_equal(pat + 8, pat, 65536));
	free(pat);
}

LUNAR_TEST_MAIN(NULL, NULL, test_bench_util_parse_check, test_bench_util_sampled_equal,
		test_bench_util_sampled_other_object, test_bench_util_poison_samples)
