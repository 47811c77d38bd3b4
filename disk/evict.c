/*
 * evict.c - bucket eviction and removal. An eviction picks a bucket by
 * policy (fifo and clock: lowest id; lru: oldest last use), seals it, waits
 * for its writers, tells the owner (notify) with no lock held - a refusal
 * keeps the bucket and moves on - then drops its records, waits for its
 * readers and deletes its files; clock first reads the records read since
 * written and writes them anew after (rescue.c). Evictions run one at a
 * time under evict_mu.
 */
#include "dsk_int.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lunar.h"

void dsk_bucket_release(struct dsk_store *s, struct dsk_bucket *b, int writer)
{
	unsigned *n = writer ? &b->writers : &b->readers;

	LC_ASSERT(*n > 0);
	if (--*n == 0)
		pthread_cond_broadcast(&s->drained);
}

static struct dsk_bucket *dsk_evict_pick(struct dsk_store *s, int sealed_only)
{
	struct dsk_bucket *best = NULL;

	for (struct dsk_bucket *b = s->head; b; b = b->next) {
		if (b->evicting || b->skip_round == s->evict_round || (sealed_only && !b->sealed))
			continue;
		if (s->cfg.policy != DSK_LRU)
			return b;
		if (!best || b->last_use < best->last_use)
			best = b;
	}
	return best;
}

/* Copy the live records for notify; *n = 0 and NULL when there are none. */
static struct dsk_record *dsk_evict_snapshot(struct dsk_bucket *b, size_t *n)
{
	struct dsk_record *v;
	size_t bytes = 0, k = 0;
	char *names;

	*n = 0;
	for (uint32_t i = 0; i < b->count && i < b->recs_cap; i++)
		if (b->recs[i] && b->recs[i]->state == DSK_REC_LIVE) {
			bytes += b->recs[i]->tlen + b->recs[i]->klen + 2u;
			k++;
		}
	if (!k)
		return NULL;
	v = malloc(k * sizeof(*v) + bytes);
	if (!v)
		return NULL;
	names = (char *)(v + k);
	for (uint32_t i = 0; i < b->count && i < b->recs_cap; i++) {
		struct dsk_rec *r = b->recs[i];
		size_t l = r ? r->tlen + r->klen + 2u : 0;

		if (!r || r->state != DSK_REC_LIVE)
			continue;
		memcpy(names, r->name, l);
		v[*n] = (struct dsk_record){
		    .tenant = names,
		    .key = names + r->tlen + 1,
		    .length = r->len,
		    .crc32c = r->crc,
		    .location = (uint64_t)b->id << 32 | r->idx,
		};
		names += l;
		(*n)++;
	}
	return v;
}

/* With s->mu held and b->evicting set: drop b's records, take it off the
 * list and wait until no I/O is in flight on it. Returns the bytes freed;
 * the caller deletes the files and frees b after unlocking. */
static uint64_t dsk_bucket_retire(struct dsk_store *s, struct dsk_bucket *b)
{
	uint64_t freed = b->data_end + b->meta_end;

	for (uint32_t i = 0; i < b->count && i < b->recs_cap; i++)
		if (b->recs[i])
			dsk_rec_drop(s, b->recs[i]);
	dsk_bucket_unlist(s, b);
	while (b->readers || b->writers)
		pthread_cond_wait(&s->drained, &s->mu);
	s->used -= freed;
	return freed;
}

/* Evict one bucket; evict_mu held, s->mu not. */
static int64_t dsk_evict_one(struct dsk_store *s, int sealed_only)
{
	struct dsk_rescue *rs;
	struct dsk_record *v;
	struct dsk_bucket *b;
	uint64_t freed;
	size_t n;
	int rc;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		b = dsk_evict_pick(s, sealed_only);
		if (!b) {
			pthread_mutex_unlock(&s->mu);
			return LUNAR_ERR_NO_AVAILABLE_HANDLE;
		}
		b->sealed = 1;
		if (s->open == b)
			s->open = NULL;
		b->evicting = 1;
		while (b->writers)
			pthread_cond_wait(&s->drained, &s->mu);
		v = dsk_evict_snapshot(b, &n);
		pthread_mutex_unlock(&s->mu);
		rs = v && s->cfg.policy == DSK_CLOCK ? dsk_rescue_read(s, b, v, &n) : NULL;
		rc = 0;
		if (n && s->cfg.notify)
			rc = s->cfg.notify(s->cfg.notify_arg, v, n);
		else if (!v && b->live)
			rc = -1; /* live records but no memory to list them */
		free(v);
		pthread_mutex_lock(&s->mu);
		if (rc == 0)
			break;
		dsk_rescue_free(rs);
		b->evicting = 0;
		b->skip_round = s->evict_round;
		s->notify_failures++;
		LC_WARN(DSK_LOG, "bucket %08x kept: notify refused (%d)", b->id, rc);
	}
	freed = dsk_bucket_retire(s, b);
	s->evicted_buckets++;
	pthread_mutex_unlock(&s->mu);
	dsk_rescue_write(s, rs);
	dsk_bucket_unlink(s, b->id);
	LC_DEBUG(DSK_LOG, "bucket %08x evicted (%zu records)", b->id, n);
	dsk_bucket_free(b);
	return (int64_t)freed;
}

int dsk_evict_for(struct dsk_store *s, uint64_t need)
{
	int rc = 0;

	pthread_mutex_lock(&s->evict_mu);
	pthread_mutex_lock(&s->mu);
	s->evict_round++;
	while (s->used + need > s->cfg.capacity) {
		pthread_mutex_unlock(&s->mu);
		rc = dsk_evict_one(s, 0) < 0 ? LUNAR_ERR_NO_AVAILABLE_HANDLE : 0;
		pthread_mutex_lock(&s->mu);
		if (rc < 0)
			break;
	}
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_unlock(&s->evict_mu);
	return rc;
}

void dsk_evict_watermark(struct dsk_store *s)
{
	uint64_t high = (uint64_t)(s->cfg.high_watermark * (double)s->cfg.capacity);

	pthread_mutex_lock(&s->mu);
	if (s->used <= high) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	pthread_mutex_unlock(&s->mu);
	if (pthread_mutex_trylock(&s->evict_mu))
		return; /* another thread is evicting */
	pthread_mutex_lock(&s->mu);
	s->evict_round++;
	while (s->used > high) {
		pthread_mutex_unlock(&s->mu);
		if (dsk_evict_one(s, 1) < 0) {
			pthread_mutex_lock(&s->mu);
			break;
		}
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_unlock(&s->evict_mu);
}

int64_t dsk_evict(struct dsk_store *s)
{
	int64_t rc;

	pthread_mutex_lock(&s->evict_mu);
	pthread_mutex_lock(&s->mu);
	s->evict_round++;
	pthread_mutex_unlock(&s->mu);
	rc = dsk_evict_one(s, 0);
	pthread_mutex_unlock(&s->evict_mu);
	return rc;
}

/* Write a DEL record for idx into b's metadata; b holds our writer ref. */
static void dsk_remove_log(struct dsk_store *s, struct dsk_bucket *b, uint64_t moff, uint32_t idx,
			   const char *tenant, size_t tlen, const char *key, size_t klen)
{
	uint32_t mlen = dsk_meta_size(tlen, klen);
	void *meta = malloc(mlen);
	struct dsk_ioctx *c;
	struct dsk_io io;

	if (!meta) {
		io.res = -1;
		goto out;
	}
	dsk_meta_encode(meta, DSK_META_DEL, idx, 0, 0, 0, tenant, tlen, key, klen);
	c = dsk_ctx_get(s);
	dsk_io_set(&io, DSK_IO_WRITE, b->mfd, meta, mlen, moff, -1);
	dsk_io_run(c, &io, 1);
	dsk_ctx_put(c);
	free(meta);
out:
	if (io.res != (int64_t)mlen) {
		/* The object is gone now; after a restart it may come back, with
		 * its verified bytes: stale but never wrong. */
		LC_WARN(DSK_LOG, "bucket %08x: deletion record not written", b->id);
		pthread_mutex_lock(&s->mu);
		s->write_failures++;
		pthread_mutex_unlock(&s->mu);
	}
}

int dsk_remove(struct dsk_store *s, const char *tenant, const char *key)
{
	size_t tlen, klen;
	struct dsk_bucket *b;
	struct dsk_rec *r;
	uint64_t moff;
	uint32_t idx, mlen;

	if (!s || !tenant || !key)
		return LUNAR_ERR_INVALID_PARAMS;
	tlen = strlen(tenant);
	klen = strlen(key);
	mlen = dsk_meta_size(tlen, klen);
	pthread_mutex_lock(&s->mu);
	r = dsk_index_find(&s->ix, tenant, tlen, key, klen,
			   dsk_index_hash(tenant, tlen, key, klen));
	if (!r || r->state != DSK_REC_LIVE) {
		pthread_mutex_unlock(&s->mu);
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	}
	b = r->b;
	idx = r->idx;
	dsk_rec_drop(s, r);
	if (b->sealed && !b->live && !b->evicting) {
		/* Nothing left to tell anyone about: the bucket goes now. */
		b->evicting = 1;
		dsk_bucket_retire(s, b);
		pthread_mutex_unlock(&s->mu);
		dsk_bucket_unlink(s, b->id);
		dsk_bucket_free(b);
		return 0;
	}
	moff = b->meta_end;
	b->meta_end += mlen;
	s->used += mlen;
	b->writers++;
	pthread_mutex_unlock(&s->mu);
	dsk_remove_log(s, b, moff, idx, tenant, tlen, key, klen);
	pthread_mutex_lock(&s->mu);
	dsk_bucket_release(s, b, 1);
	pthread_mutex_unlock(&s->mu);
	return 0;
}
