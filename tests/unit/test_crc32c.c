/*
 * test_crc32c.c - CRC32C: the published vectors, then each implementation
 * this CPU has (table, crc32 chains, AVX2 and AVX-512 folding) against the
 * table path on random buffers of many lengths and misalignments, chaining,
 * and lc_copy_crc32c against memcpy + lc_crc32c on both sides of the
 * non-temporal threshold, with guard bytes around the destination.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crc32c.h"
#include "tests/cmocka_main.h"

#define MAXLEN 100000
#define GUARD  64

static unsigned char *random_buf(size_t len, unsigned seed)
{
	unsigned char *p = malloc(len);
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	assert_non_null(p);
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)x;
	}
	return p;
}

/* Every length up to 1100, then a sparse walk to MAXLEN, with the block
 * edges of the three-stream rounds (3 x 256 and 3 x 8192 bytes) and their
 * neighbours. */
static size_t next_len(size_t len)
{
	static const size_t edges[] = {
	    3 * 256 - 1, 3 * 256,      3 * 256 + 8,	   6 * 256 + 7,	 3 * 8192 - 1,
	    3 * 8192,	 3 * 8192 + 1, 3 * 8192 + 3 * 256, 6 * 8192 + 9, 9 * 8192 + 777};

	if (len < 1100)
		return len + 1;
	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
		if (edges[i] > len)
			return len + 997 < edges[i] ? len + 997 : edges[i];
	return len + 997 + len / 10;
}

static const char *const impl_names[] = {"table", "crc32 chains", "AVX2 folding",
					 "AVX-512 folding"};

/* Run check under every implementation this CPU has, then restore the best. */
static void each_impl(void (*check)(void))
{
	int best = lc_crc32c_best();

	for (int impl = LC_CRC32C_TABLE; impl <= LC_CRC32C_FOLD512; impl++) {
		if (lc_crc32c_use(impl)) {
			print_message("%s: not on this CPU, not run\n", impl_names[impl]);
			continue;
		}
		check();
	}
	assert_int_equal(lc_crc32c_use(best), 0);
}

static void check_vector(const void *buf, size_t len, uint32_t want)
{
	assert_int_equal(lc_crc32c(0, buf, len), want);
	assert_int_equal(lc_crc32c_sw(0, buf, len), want);
}

static void test_crc32c_known_vectors(void **state)
{
	unsigned char b[32];

	(void)state;
	check_vector("123456789", 9, 0xe3069283u);
	check_vector(NULL, 0, 0);
	check_vector("a", 1, 0xc1d04330u);
	/* RFC 3720 B.4 */
	memset(b, 0, sizeof(b));
	check_vector(b, 32, 0x8a9136aau);
	memset(b, 0xff, sizeof(b));
	check_vector(b, 32, 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	check_vector(b, 32, 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	check_vector(b, 32, 0x113fdb5cu);
	/* A nonzero start continues, not restarts. */
	assert_int_equal(lc_crc32c(0xe3069283u, NULL, 0), 0xe3069283u);
}

static void check_matches_table(void)
{
	unsigned char *buf = random_buf(MAXLEN + 64, 1);

	for (size_t len = 0; len <= MAXLEN; len = next_len(len))
		for (size_t off = 0; off < 16; off += len < 1100 ? 5 : 1) {
			uint32_t seed = (uint32_t)(len * 2654435761u);

			assert_int_equal(lc_crc32c(seed, buf + off, len),
					 lc_crc32c_sw(seed, buf + off, len));
		}
	free(buf);
}

static void test_crc32c_each_impl_matches_table(void **state)
{
	(void)state;
	each_impl(check_matches_table);
}

/* An implementation the CPU lacks, or none at all, is refused and changes
 * nothing. */
static void test_crc32c_use_refuses_missing_impl(void **state)
{
	int best = lc_crc32c_best();

	(void)state;
	assert_in_range(best, LC_CRC32C_TABLE, LC_CRC32C_FOLD512);
	assert_int_equal(lc_crc32c_use(-1), -1);
	assert_int_equal(lc_crc32c_use(LC_CRC32C_FOLD512 + 1), -1);
	if (best < LC_CRC32C_FOLD512)
		assert_int_equal(lc_crc32c_use(best + 1), -1);
#ifdef LC_CRC32C_AVX512_EMULATED
	/* Built with SIMDe's AVX-512 (avx512_emulated.h): wherever AVX2
	 * folding runs, AVX-512 folding runs too, and each check ran it. */
	if (__builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul") &&
	    __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx2"))
		assert_int_equal(best, LC_CRC32C_FOLD512);
#endif
	assert_int_equal(lc_crc32c_use(LC_CRC32C_TABLE), 0);
	assert_int_equal(lc_crc32c_use(best), 0);
	assert_int_equal(lc_crc32c(0, "123456789", 9), 0xe3069283u);
	print_message("this CPU's best: %s\n", impl_names[best]);
}

static void check_chaining(void)
{
	size_t len = 5 * 8192 * 3 + 123;
	unsigned char *buf = random_buf(len, 2);
	uint32_t whole = lc_crc32c(0, buf, len);

	assert_int_equal(whole, lc_crc32c_sw(0, buf, len));
	for (size_t cut = 0; cut <= len; cut += cut < 64 ? 1 : 4099) {
		uint32_t c = lc_crc32c(0, buf, cut);

		assert_int_equal(lc_crc32c(c, buf + cut, len - cut), whole);
		c = lc_crc32c_sw(0, buf, cut);
		assert_int_equal(lc_crc32c_sw(c, buf + cut, len - cut), whole);
	}
	/* Byte at a time through the table path. */
	uint32_t c = 0;

	for (size_t i = 0; i < 4096; i++)
		c = lc_crc32c_sw(c, buf + i, 1);
	assert_int_equal(c, lc_crc32c(0, buf, 4096));
	free(buf);
}

static void test_crc32c_chaining(void **state)
{
	(void)state;
	each_impl(check_chaining);
}

/* One copy: bytes, guards and checksum, through the table implementation,
 * the chosen one and the one that never streams. */
static void check_copy(const unsigned char *src, unsigned char *dbuf, size_t len, size_t doff)
{
	uint32_t seed = (uint32_t)len ^ 0x5a5a5a5au;
	uint32_t want = lc_crc32c(seed, src, len);

	assert_int_equal(want, lc_crc32c_sw(seed, src, len));
	for (int impl = 0; impl < 3; impl++) {
		unsigned char *dst = dbuf + GUARD + doff;

		memset(dbuf, 0xee, GUARD + doff);
		memset(dst, 0x11, len + GUARD);
		if (impl == 0)
			assert_int_equal(lc_copy_crc32c_sw(dst, src, len, seed), want);
		else if (impl == 1)
			assert_int_equal(lc_copy_crc32c(dst, src, len, seed), want);
		else
			assert_int_equal(lc_copy_crc32c_cached(dst, src, len, seed), want);
		assert_memory_equal(dst, src, len);
		for (size_t i = 0; i < GUARD + doff; i++)
			assert_int_equal(dbuf[i], 0xee);
		for (size_t i = 0; i < GUARD; i++)
			assert_int_equal(dst[len + i], 0x11);
	}
}

static void check_copy_matches_memcpy(void)
{
	static const size_t offs[][2] = {{0, 0}, {1, 0}, {0, 1}, {3, 7}, {8, 13}, {63, 5}};
	unsigned char *src = random_buf(MAXLEN + 64, 3);
	unsigned char *dbuf = malloc(MAXLEN + 3 * GUARD + 64);

	assert_non_null(dbuf);
	for (size_t len = 0; len <= MAXLEN; len = next_len(len)) {
		size_t o = len % (sizeof(offs) / sizeof(offs[0]));

		check_copy(src + offs[o][0], dbuf, len, offs[o][1]);
		if (len < 64)
			for (size_t k = 0; k < 6; k++)
				check_copy(src + offs[k][0], dbuf, len, offs[k][1]);
	}
	free(src);
	free(dbuf);
}

static void test_crc32c_copy_matches_memcpy(void **state)
{
	(void)state;
	each_impl(check_copy_matches_memcpy);
}

static void check_copy_streaming_sizes(void)
{
	static const size_t lens[] = {
	    LC_COPY_CRC32C_NT_MIN - 1,
	    LC_COPY_CRC32C_NT_MIN,
	    LC_COPY_CRC32C_NT_MIN + 1,
	    LC_COPY_CRC32C_NT_MIN + 77,
	    (1u << 20),
	    (1u << 20) + 24581,
	    (4u << 20) - 3,
	    (4u << 20),
	};
	size_t max = (4u << 20) + 64;
	unsigned char *src = random_buf(max, 4);
	unsigned char *dbuf = malloc(max + 3 * GUARD + 64);

	assert_non_null(dbuf);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		for (size_t k = 0; k < 4; k++)
			check_copy(src + (k * 5 + i) % 16, dbuf, lens[i], (k * 13 + i) % 64);
	free(src);
	free(dbuf);
}

static void test_crc32c_copy_streaming_sizes(void **state)
{
	(void)state;
	each_impl(check_copy_streaming_sizes);
}

/* Combining the CRCs of two pieces gives the CRC of both, at every split. */
static void test_crc32c_combine(void **state)
{
	static const size_t lens[] = {0, 1, 7, 4096, 65537, (1u << 20) + 3};
	size_t max = (2u << 20) + 16;
	unsigned char *buf = random_buf(max, 5);

	(void)state;
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
			size_t la = lens[i], lb = lens[j];
			uint32_t a = lc_crc32c(0, buf, la), b = lc_crc32c(0, buf + la, lb);

			assert_int_equal(lc_crc32c_combine(a, b, lb), lc_crc32c(0, buf, la + lb));
		}
	}
	free(buf);
}

LUNAR_TEST_MAIN(NULL, NULL, test_crc32c_known_vectors, test_crc32c_each_impl_matches_table,
		test_crc32c_use_refuses_missing_impl, test_crc32c_chaining,
		test_crc32c_copy_matches_memcpy, test_crc32c_copy_streaming_sizes,
		test_crc32c_combine)
