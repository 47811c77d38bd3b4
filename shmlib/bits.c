/*
 * bits.c - sets of free things (completion slots, the arena's cells) that
 * threads take and give back with one CAS or atomic OR, no lock.
 */
#include "shm_int.h"

#include <errno.h>
#include <stdlib.h>

#include "atomic.h"

int shm_bits_init(struct shm_bits *b, uint32_t n)
{
	b->words = (n + 63) / 64;
	b->w = n ? calloc(b->words, sizeof(*b->w)) : NULL;
	if (n && !b->w)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		b->w[i / 64] |= 1ull << (i % 64);
	return 0;
}

void shm_bits_fini(struct shm_bits *b)
{
	free(b->w);
	b->w = NULL;
	b->words = 0;
}

int shm_bits_take(struct shm_bits *b, uint32_t *i)
{
	static uint32_t threads;
	static __thread uint32_t start; /* 1 + this thread's number */

	if (!start)
		start = lc_fetch_add(&threads, 1u) + 1;
	for (uint32_t k = 0; k < b->words; k++) {
		uint32_t w = (start + k) % b->words;
		uint64_t v = LC_READ_ONCE(b->w[w]);

		while (v) {
			uint64_t bit = v & (~v + 1);

			if (lc_cas(&b->w[w], &v, v & ~bit)) {
				*i = w * 64 + (uint32_t)__builtin_ctzll(bit);
				return 0;
			}
		}
	}
	return -1;
}

void shm_bits_give(struct shm_bits *b, uint32_t i)
{
	lc_fetch_or(&b->w[i / 64], 1ull << (i % 64));
}

uint32_t shm_bits_free(const struct shm_bits *b)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < b->words; k++)
		n += (uint32_t)__builtin_popcountll(LC_READ_ONCE(b->w[k]));
	return n;
}
