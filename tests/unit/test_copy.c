/*
 * test_copy.c - lc_copy is byte-exact for every length up to a few hundred
 * bytes and a walk of lengths to 8 MiB, at odd source and destination
 * alignments, on both sides of LC_COPY_NT_MIN, never writing outside dst;
 * lc_copy_stream likewise, at every length from 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "copy.h"
#include "tests/cmocka_main.h"

#define MAXLEN (8u << 20)
#define GUARD  64

static unsigned char *src, *dbuf;

static int setup(void **state)
{
	uint64_t x = 88172645463325252ull;

	(void)state;
	src = malloc(MAXLEN + 64);
	dbuf = malloc(MAXLEN + 2 * GUARD + 64);
	if (!src || !dbuf)
		return -1;
	for (size_t i = 0; i < MAXLEN + 64; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		src[i] = (unsigned char)x;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	free(src);
	free(dbuf);
	return 0;
}

static void check_with(void (*copy)(void *, const void *, size_t), size_t len, size_t soff,
		       size_t doff)
{
	unsigned char *dst = dbuf + GUARD + doff;

	memset(dbuf, 0xa5, GUARD + doff);
	memset(dst, 0x5a, len + GUARD);
	copy(dst, src + soff, len);
	assert_memory_equal(dst, src + soff, len);
	for (size_t i = 0; i < GUARD + doff; i++)
		assert_int_equal(dbuf[i], 0xa5);
	for (size_t i = 0; i < GUARD; i++)
		assert_int_equal(dst[len + i], 0x5a);
}

static void check(size_t len, size_t soff, size_t doff)
{
	check_with(lc_copy, len, soff, doff);
}

static void test_copy_small_lengths(void **state)
{
	(void)state;
	for (size_t len = 0; len <= 300; len++)
		for (size_t k = 0; k < 4; k++)
			check(len, (len + k * 3) % 17, (len * 7 + k * 5) % 64);
}

static void test_copy_threshold(void **state)
{
	(void)state;
	for (size_t len = LC_COPY_NT_MIN - 130; len <= LC_COPY_NT_MIN + 260; len++)
		check(len, len % 16, (len * 3) % 64);
}

static void test_copy_large_odd_alignments(void **state)
{
	static const size_t offs[][2] = {{0, 0}, {1, 0}, {0, 1}, {7, 33}, {15, 63}, {9, 60}};

	(void)state;
	for (size_t len = 301; len <= MAXLEN; len = len * 5 / 4 + 13)
		check(len, offs[len % 6][0], offs[len % 6][1]);
	for (size_t k = 0; k < 6; k++) {
		check(MAXLEN, offs[k][0], offs[k][1]);
		check(MAXLEN - 63, offs[k][0], offs[k][1]);
	}
}

/* The streaming path alone: short lengths, whose head or tail is all of
 * them, and a walk past a few lines. */
static void test_copy_stream_any_length(void **state)
{
	(void)state;
	for (size_t len = 0; len <= 600; len++)
		for (size_t k = 0; k < 4; k++)
			check_with(lc_copy_stream, len, (len + k * 3) % 17, (len * 7 + k * 5) % 64);
	for (size_t len = 601; len <= (1u << 20); len = len * 5 / 4 + 13)
		check_with(lc_copy_stream, len, len % 16, (len * 3) % 64);
}

LUNAR_TEST_MAIN(setup, teardown, test_copy_small_lengths, test_copy_threshold,
		test_copy_large_odd_alignments, test_copy_stream_any_length)
