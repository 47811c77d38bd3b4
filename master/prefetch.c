/*
 * prefetch.c - a batch's keys asked for ahead of their lookups (mst_obj.h,
 * struct mst_prefetch): first the slot each probe starts at, read from the
 * shard's table pointer and size without the lock (the writer stores them
 * so, shard_grow), which at worst names a table just replaced: a prefetch
 * of any address never faults. Then, under the shard's lock if it is free
 * at once (a walk never waits, and never holds two), the object in that
 * slot when its hash is the key's: its fields and the start of its name.
 */
#include <pthread.h>
#include <stdint.h>

#include "atomic.h"
#include "mst_int.h"
#include "mst_obj.h"

static void ask_slot(struct mst_prefetch *a, size_t i)
{
	uint64_t h = 0;
	const struct mst_shard *s;
	uintptr_t v;

	if (i >= a->n || mst_okey_hash(a->tenant, a->keys[i], &h))
		h = 0; /* none, or refused at its lookup: nothing worth asking */
	a->hash[i % MST_PREFETCH_SLOT] = h;
	if (!h)
		return;
	s = &a->m->shards[h % MST_SHARDS];
	v = (uintptr_t)LC_READ_ONCE(s->slots);
	__builtin_prefetch(
	    (const void *)(v + mst_obj_home(h, LC_READ_ONCE(s->cap)) * sizeof(struct mst_slot)));
}

static void ask_object(struct mst_prefetch *a, size_t i)
{
	uint64_t h = a->hash[i % MST_PREFETCH_SLOT];
	struct mst_shard *s;
	const struct mst_slot *v;

	if (i >= a->n || !h)
		return;
	s = &a->m->shards[h % MST_SHARDS];
	if (pthread_mutex_trylock(&s->lock))
		return;
	v = &s->slots[mst_obj_home(h, s->cap)];
	if (v->o && v->hash == h) {
		mst_obj_prefetch(v->o);
		__builtin_prefetch(v->o->kbuf);
	}
	pthread_mutex_unlock(&s->lock);
}

void mst_prefetch_begin(struct mst_prefetch *a, struct mst_master *m, const char *tenant,
			char *const *keys, size_t n)
{
	*a = (struct mst_prefetch){.m = m, .tenant = tenant, .keys = keys, .n = n};
	for (size_t i = 0; i < MST_PREFETCH_SLOT; i++)
		ask_slot(a, i);
}

void mst_prefetch_step(struct mst_prefetch *a, size_t i)
{
	ask_object(a, i + MST_PREFETCH_OBJ);
	ask_slot(a, i + MST_PREFETCH_SLOT);
}
