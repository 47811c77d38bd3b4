/*
 * index.c - the in-memory index: (tenant, key) -> record, a chained hash
 * table with a power-of-two slot array that doubles when the load passes 1.
 * Callers hold the store lock.
 */
#include "dsk_int.h"

#include <stdlib.h>
#include <string.h>

#include "lunar.h"

#define DSK_INDEX_MIN 1024u

int dsk_index_init(struct dsk_index *ix)
{
	ix->slots = calloc(DSK_INDEX_MIN, sizeof(*ix->slots));
	if (!ix->slots)
		return LUNAR_ERR_INTERNAL;
	ix->mask = DSK_INDEX_MIN - 1;
	ix->count = 0;
	return 0;
}

void dsk_index_fini(struct dsk_index *ix)
{
	if (!ix->slots)
		return;
	for (size_t i = 0; i <= ix->mask; i++) {
		struct dsk_rec *r = ix->slots[i], *next;

		for (; r; r = next) {
			next = r->hnext;
			free(r);
		}
	}
	free(ix->slots);
	ix->slots = NULL;
}

/* FNV-1a over tenant, a NUL separator, then key. */
uint64_t dsk_index_hash(const char *tenant, size_t tlen, const char *key, size_t klen)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < tlen; i++)
		h = (h ^ (unsigned char)tenant[i]) * 0x100000001b3ull;
	h *= 0x100000001b3ull;
	for (size_t i = 0; i < klen; i++)
		h = (h ^ (unsigned char)key[i]) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

struct dsk_rec *dsk_index_find(struct dsk_index *ix, const char *tenant, size_t tlen,
			       const char *key, size_t klen, uint64_t hash)
{
	for (struct dsk_rec *r = ix->slots[hash & ix->mask]; r; r = r->hnext)
		if (r->hash == hash && r->tlen == tlen && r->klen == klen &&
		    !memcmp(r->name, tenant, tlen) && !memcmp(dsk_rec_key(r), key, klen))
			return r;
	return NULL;
}

static void dsk_index_grow(struct dsk_index *ix)
{
	size_t n = (ix->mask + 1) * 2;
	struct dsk_rec **slots = calloc(n, sizeof(*slots));

	if (!slots)
		return; /* longer chains, still correct */
	for (size_t i = 0; i <= ix->mask; i++) {
		struct dsk_rec *r = ix->slots[i], *next;

		for (; r; r = next) {
			next = r->hnext;
			r->hnext = slots[r->hash & (n - 1)];
			slots[r->hash & (n - 1)] = r;
		}
	}
	free(ix->slots);
	ix->slots = slots;
	ix->mask = n - 1;
}

void dsk_index_insert(struct dsk_index *ix, struct dsk_rec *r)
{
	if (ix->count > ix->mask)
		dsk_index_grow(ix);
	r->hnext = ix->slots[r->hash & ix->mask];
	ix->slots[r->hash & ix->mask] = r;
	ix->count++;
}

void dsk_index_remove(struct dsk_index *ix, struct dsk_rec *r)
{
	struct dsk_rec **pp = &ix->slots[r->hash & ix->mask];

	for (; *pp; pp = &(*pp)->hnext) {
		if (*pp == r) {
			*pp = r->hnext;
			r->hnext = NULL;
			ix->count--;
			return;
		}
	}
}
