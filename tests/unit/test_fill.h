/*
 * test_fill.h - test_fill, the seeded xorshift32 byte pattern the disk and
 * engine unit tests write and check. Include after cmocka.h or <stdint.h>.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_FILL_H
#define LUNAR_TESTS_UNIT_TEST_FILL_H

#include <stddef.h>
#include <stdint.h>

/* test_fill - n bytes of seed's pattern at p: the same seed, the same bytes;
 * different seeds, different bytes (seed 0 included). */
static inline void test_fill(void *p, size_t n, uint32_t seed)
{
	unsigned char *c = p;
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		c[i] = (unsigned char)x;
	}
}

#endif /* LUNAR_TESTS_UNIT_TEST_FILL_H */
