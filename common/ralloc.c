/*
 * ralloc.c - range allocator; see ralloc.h.
 *
 * Every range, free or allocated, is a block on an address-ordered list so
 * that a freed block finds its neighbours in O(1) and merges with them. Free
 * blocks also sit on one of NBINS size-segregated lists (TLSF-style: log2
 * class split into SL_COUNT linear sub-bins) indexed by a two-level bitmap;
 * blocks from lc_ralloc_get sit in a hash table keyed by offset, those from
 * lc_ralloc_take are their own handle. Blocks come from a pool, so a steady
 * stream of get/put does not touch malloc.
 */
#include "ralloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SL_BITS	   4
#define SL_COUNT   (1u << SL_BITS)
#define NBINS	   ((64 - SL_BITS + 1) * SL_COUNT)
#define NWORDS	   ((NBINS + 63) / 64)
#define POOL_CHUNK 4096
#define SCAN_LIMIT 16 /* blocks of the request's own bin tried before larger bins */

struct lc_range {
	uint64_t off, len;
	struct lc_range *prev, *next;	/* address order */
	struct lc_range *fprev, *fnext; /* free list of its bin, or hash chain (fnext) */
	int free;			/* 0 allocated, 1 free, 2 in the pool (no range) */
};

struct chunk {
	struct chunk *next;
	struct lc_range blks[POOL_CHUNK];
};

struct lc_ralloc {
	uint64_t capacity, align, used;
	unsigned align_shift;
	struct lc_range *bins[NBINS];
	uint64_t bitmap[NWORDS];
	uint64_t summary; /* bit w: bitmap[w] != 0 */
	struct lc_range **hash;
	uint64_t hmask, nalloc;
	struct lc_range *spare; /* pooled unused blocks, linked by next */
	struct chunk *chunks;
	struct lc_range *head; /* the block at offset 0: never released */
	struct lc_range *hint; /* lc_ralloc_take_at's last stop, to walk from */
};

static unsigned bin_of(uint64_t len)
{
	unsigned fl;

	if (len < SL_COUNT)
		return (unsigned)len;
	fl = 63u - (unsigned)__builtin_clzll(len);
	return (fl - SL_BITS + 1) * SL_COUNT + (unsigned)((len >> (fl - SL_BITS)) & (SL_COUNT - 1));
}

static void bit_set(struct lc_ralloc *a, unsigned b)
{
	a->bitmap[b / 64] |= 1ull << (b % 64);
	a->summary |= 1ull << (b / 64);
}

static void bit_clear(struct lc_ralloc *a, unsigned b)
{
	a->bitmap[b / 64] &= ~(1ull << (b % 64));
	if (!a->bitmap[b / 64])
		a->summary &= ~(1ull << (b / 64));
}

/* The first non-empty bin >= b, or NBINS. */
static unsigned bin_next(const struct lc_ralloc *a, unsigned b)
{
	unsigned w = b / 64;
	uint64_t bits, words;

	if (b >= NBINS)
		return NBINS;
	bits = a->bitmap[w] & (~0ull << (b % 64));
	if (bits)
		return w * 64 + (unsigned)__builtin_ctzll(bits);
	words = w + 1 < 64 ? a->summary & (~0ull << (w + 1)) : 0;
	if (!words)
		return NBINS;
	w = (unsigned)__builtin_ctzll(words);
	return w * 64 + (unsigned)__builtin_ctzll(a->bitmap[w]);
}

static void free_insert(struct lc_ralloc *a, struct lc_range *b)
{
	unsigned i = bin_of(b->len);

	b->free = 1;
	b->fprev = NULL;
	b->fnext = a->bins[i];
	if (b->fnext)
		b->fnext->fprev = b;
	a->bins[i] = b;
	bit_set(a, i);
}

static void free_remove(struct lc_ralloc *a, struct lc_range *b)
{
	unsigned i = bin_of(b->len);

	if (b->fprev)
		b->fprev->fnext = b->fnext;
	else
		a->bins[i] = b->fnext;
	if (b->fnext)
		b->fnext->fprev = b->fprev;
	if (!a->bins[i])
		bit_clear(a, i);
	b->free = 0;
}

static struct lc_range *blk_new(struct lc_ralloc *a)
{
	struct lc_range *b;

	if (!a->spare) {
		struct chunk *c = malloc(sizeof(*c));

		if (!c)
			return NULL;
		c->next = a->chunks;
		a->chunks = c;
		for (size_t i = 0; i < POOL_CHUNK; i++) {
			c->blks[i].next = a->spare;
			a->spare = &c->blks[i];
		}
	}
	b = a->spare;
	a->spare = b->next;
	memset(b, 0, sizeof(*b));
	return b;
}

static void blk_release(struct lc_ralloc *a, struct lc_range *b)
{
	b->free = 2;
	b->next = a->spare;
	a->spare = b;
}

static uint64_t hash_slot(const struct lc_ralloc *a, uint64_t off)
{
	return ((off >> a->align_shift) * 0x9e3779b97f4a7c15ull >> 17) & a->hmask;
}

static int hash_grow(struct lc_ralloc *a)
{
	uint64_t nmask = a->hmask * 2 + 1;
	struct lc_range **nh = calloc(nmask + 1, sizeof(*nh));
	struct lc_range **old = a->hash;
	uint64_t omask = a->hmask;

	if (!nh)
		return -ENOMEM;
	a->hash = nh;
	a->hmask = nmask;
	for (uint64_t i = 0; i <= omask; i++) {
		struct lc_range *b = old[i], *n;

		for (; b; b = n) {
			uint64_t s = hash_slot(a, b->off);

			n = b->fnext;
			b->fnext = nh[s];
			nh[s] = b;
		}
	}
	free(old);
	return 0;
}

static struct lc_range **hash_find(const struct lc_ralloc *a, uint64_t off)
{
	struct lc_range **pp = &a->hash[hash_slot(a, off)];

	while (*pp && (*pp)->off != off)
		pp = &(*pp)->fnext;
	return pp;
}

struct lc_ralloc *lc_ralloc_create(uint64_t size, uint64_t align)
{
	struct lc_ralloc *a;
	struct lc_range *b;

	if (!align || (align & (align - 1)) || size < align)
		return NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->align = align;
	a->align_shift = (unsigned)__builtin_ctzll(align);
	a->capacity = size & ~(align - 1);
	a->hmask = 1023;
	a->hash = calloc(a->hmask + 1, sizeof(*a->hash));
	if (!a->hash)
		goto err_free;
	b = blk_new(a);
	if (!b)
		goto err_hash;
	b->len = a->capacity;
	free_insert(a, b);
	a->head = a->hint = b;
	return a;
err_hash:
	free(a->hash);
err_free:
	free(a);
	return NULL;
}

void lc_ralloc_destroy(struct lc_ralloc *a)
{
	struct chunk *c, *n;

	if (!a)
		return;
	for (c = a->chunks; c; c = n) {
		n = c->next;
		free(c);
	}
	free(a->hash);
	free(a);
}

/* Best fit among the first SCAN_LIMIT blocks of bin i that hold len (all of
 * them when exhaustive), NULL if none. */
static struct lc_range *bin_best(struct lc_ralloc *a, unsigned i, uint64_t len, int exhaustive)
{
	struct lc_range *best = NULL;
	unsigned seen = 0;

	for (struct lc_range *b = a->bins[i]; b; b = b->fnext) {
		if (b->len >= len && (!best || b->len < best->len)) {
			best = b;
			if (b->len == len)
				break;
		}
		if (!exhaustive && ++seen == SCAN_LIMIT)
			break;
	}
	return best;
}

/* A free block holding len: a close fit from len's own bin, else the head of
 * the next non-empty bin (every block there holds len), else a full scan of
 * the own bin. */
static struct lc_range *find_fit(struct lc_ralloc *a, uint64_t len)
{
	unsigned i = bin_of(len), j;
	struct lc_range *b = bin_best(a, i, len, 0);

	if (b)
		return b;
	j = bin_next(a, i + 1);
	if (j < NBINS)
		return a->bins[j];
	return bin_best(a, i, len, 1);
}

uint64_t lc_ralloc_round(const struct lc_ralloc *a, uint64_t len)
{
	return (len + a->align - 1) & ~(a->align - 1);
}

/* Merge b's successor into b; the successor is free and off its bin. */
static void absorb_next(struct lc_ralloc *a, struct lc_range *b)
{
	struct lc_range *n = b->next;

	b->len += n->len;
	b->next = n->next;
	if (n->next)
		n->next->prev = b;
	blk_release(a, n);
}

/* Free the allocated block b, merging it with free neighbours. */
static void release(struct lc_ralloc *a, struct lc_range *b)
{
	a->used -= b->len;
	if (b->next && b->next->free) {
		free_remove(a, b->next);
		absorb_next(a, b);
	}
	if (b->prev && b->prev->free) {
		struct lc_range *p = b->prev;

		free_remove(a, p);
		absorb_next(a, p);
		b = p;
	}
	free_insert(a, b);
}

/* Allocate a block of len bytes; NULL and *err if none (else *err untouched). */
static struct lc_range *carve(struct lc_ralloc *a, uint64_t len, int *err)
{
	struct lc_range *b = NULL, *rest;

	if (len && len <= a->capacity) {
		len = lc_ralloc_round(a, len);
		b = find_fit(a, len);
	}
	if (!b) {
		*err = -ENOSPC;
		return NULL;
	}
	free_remove(a, b);
	if (b->len > len) {
		rest = blk_new(a);
		if (!rest) {
			free_insert(a, b);
			*err = -ENOMEM;
			return NULL;
		}
		rest->off = b->off + len;
		rest->len = b->len - len;
		rest->prev = b;
		rest->next = b->next;
		if (b->next)
			b->next->prev = rest;
		b->next = rest;
		b->len = len;
		free_insert(a, rest);
	}
	a->used += b->len;
	return b;
}

int lc_ralloc_get(struct lc_ralloc *a, uint64_t len, uint64_t *off)
{
	struct lc_range **slot, *b;
	int err;

	b = carve(a, len, &err);
	if (!b)
		return err;
	if (a->nalloc >= a->hmask && hash_grow(a)) {
		release(a, b);
		return -ENOMEM;
	}
	/* A free range is never in the table: no need to walk the chain. */
	slot = &a->hash[hash_slot(a, b->off)];
	b->fnext = *slot;
	*slot = b;
	a->nalloc++;
	*off = b->off;
	return 0;
}

struct lc_range *lc_ralloc_take(struct lc_ralloc *a, uint64_t len, uint64_t *off, int *err)
{
	struct lc_range *b = carve(a, len, err);

	if (b)
		*off = b->off;
	return b;
}

/* Link n into the address list right after b. */
static void link_after(struct lc_range *b, struct lc_range *n)
{
	n->prev = b;
	n->next = b->next;
	if (b->next)
		b->next->prev = n;
	b->next = n;
}

/* The block holding off: walked from the hint, which take_at leaves just
 * past its range, so ranges taken in ascending order cost O(1) each. */
static struct lc_range *block_at(struct lc_ralloc *a, uint64_t off)
{
	struct lc_range *b = a->hint && a->hint->free != 2 ? a->hint : a->head;

	while (b && b->off > off)
		b = b->prev;
	while (b && b->off + b->len <= off)
		b = b->next;
	return b;
}

/* Two spare blocks into n[] for a cut: 0, or -1 with *err = -ENOMEM and
 * none taken. */
static int blk_pair(struct lc_ralloc *a, struct lc_range *n[2], int *err)
{
	n[0] = blk_new(a);
	n[1] = n[0] ? blk_new(a) : NULL;
	if (n[1])
		return 0;
	if (n[0])
		blk_release(a, n[0]);
	*err = -ENOMEM;
	return -1;
}

struct lc_range *lc_ralloc_take_at(struct lc_ralloc *a, uint64_t off, uint64_t len, int *err)
{
	struct lc_range *b, *n[2];

	len = lc_ralloc_round(a, len);
	if (!len || (off & (a->align - 1)) || off > a->capacity || len > a->capacity - off) {
		*err = -EINVAL;
		return NULL;
	}
	b = block_at(a, off);
	if (!b || b->free != 1 || off + len > b->off + b->len) {
		*err = -EEXIST;
		return NULL;
	}
	if (blk_pair(a, n, err))
		return NULL;
	free_remove(a, b);
	if (b->off < off) { /* the head of b stays free */
		n[0]->off = off;
		n[0]->len = b->off + b->len - off;
		link_after(b, n[0]);
		b->len = off - b->off;
		free_insert(a, b);
		b = n[0];
		n[0] = NULL;
	}
	if (b->len > len) { /* and its tail */
		n[1]->off = off + len;
		n[1]->len = b->len - len;
		link_after(b, n[1]);
		b->len = len;
		free_insert(a, n[1]);
		n[1] = NULL;
	}
	for (int i = 0; i < 2; i++)
		if (n[i])
			blk_release(a, n[i]);
	b->free = 0;
	a->used += len;
	a->hint = b->next ? b->next : b;
	return b;
}

struct lc_range *lc_ralloc_split(struct lc_ralloc *a, struct lc_range *r, uint64_t off,
				 uint64_t len, struct lc_range **head, struct lc_range **tail,
				 int *err)
{
	struct lc_range *n[2];

	len = lc_ralloc_round(a, len);
	if (r->free || !len || (off & (a->align - 1)) || off < r->off || off - r->off > r->len ||
	    len > r->len - (off - r->off)) {
		*err = -EINVAL; /* written so that nothing wraps */
		return NULL;
	}
	/* Both blocks first: once r is cut, nothing may fail. */
	if (blk_pair(a, n, err))
		return NULL;
	*head = *tail = NULL;
	if (r->off < off) { /* r keeps the head, n[0] becomes the middle */
		n[0]->off = off;
		n[0]->len = r->off + r->len - off;
		link_after(r, n[0]);
		r->len = off - r->off;
		*head = r;
		r = n[0];
		n[0] = NULL;
	}
	if (r->len > len) {
		n[1]->off = off + len;
		n[1]->len = r->len - len;
		link_after(r, n[1]);
		r->len = len;
		*tail = n[1];
		n[1] = NULL;
	}
	for (int i = 0; i < 2; i++)
		if (n[i])
			blk_release(a, n[i]);
	return r;
}

int lc_ralloc_put(struct lc_ralloc *a, uint64_t off, uint64_t *freed)
{
	struct lc_range **slot = hash_find(a, off);
	struct lc_range *b = *slot;

	if (!b)
		return -ENOENT;
	if (freed)
		*freed = b->len;
	*slot = b->fnext;
	a->nalloc--;
	release(a, b);
	return 0;
}

int lc_ralloc_give(struct lc_ralloc *a, struct lc_range *r, uint64_t *freed)
{
	if (r->free)
		return -EINVAL;
	if (freed)
		*freed = r->len;
	release(a, r);
	return 0;
}

uint64_t lc_ralloc_used(const struct lc_ralloc *a)
{
	return a->used;
}

uint64_t lc_ralloc_capacity(const struct lc_ralloc *a)
{
	return a->capacity;
}

uint64_t lc_ralloc_largest_free(const struct lc_ralloc *a)
{
	uint64_t best = 0;

	for (int w = NWORDS - 1; w >= 0; w--) {
		unsigned i;

		if (!a->bitmap[w])
			continue;
		i = (unsigned)w * 64 + 63u - (unsigned)__builtin_clzll(a->bitmap[w]);
		for (struct lc_range *b = a->bins[i]; b; b = b->fnext)
			if (b->len > best)
				best = b->len;
		break;
	}
	return best;
}
