/*
 * evict.c - memory eviction. A round takes a census of the candidates shard
 * by shard (one shard lock at a time, no global lock), then evicts the
 * ceil(candidates * eviction_ratio) least recently used (a read, a commit
 * or a put of the same bytes is a use), picked by quickselect rather than
 * a full sort. Soft-pinned objects (within their TTL) are taken only when
 * the unpinned candidates run out, and only with allow_evict_soft_pinned.
 * Under pressure (memory above the watermark, or an allocation failed) the
 * round goes on, chunk by chunk, until use falls below
 * (1 - eviction_ratio) * watermark, as Mooncake's second pass does.
 * Candidates: COMPLETE, lease expired, not hard-pinned, not busy.
 *
 * A census costs a visit of every object, so the round that took it keeps
 * some of its candidates left for the rounds of the next second. What
 * becomes a candidate later has mostly been used since the census or
 * within a lease TTL before it (its lease ran out since), so the unpinned
 * candidates used before that are still the least recently used: those are
 * kept (the oldest few rounds' worth), later rounds take them in order,
 * passing over any used since, and take a new census (soft-pinned
 * candidates and all) when none is left. The exceptions, each late by at
 * most that second: an object whose soft pin ends, whose offload task ends,
 * or whose upsert is revoked, which keeps its old last use.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "mst_int.h"
#include "mst_obj.h"

#define CENSUS_KEEP_ROUNDS 4	/* a census is kept for this many rounds' worth */
#define CENSUS_KEEP_MIN	   4096 /* ... but no fewer candidates */
#define CENSUS_MAX_AGE_MS  1000 /* and no longer */

struct census_arg {
	uint64_t now;
	int soft_too;
	struct mst_census *cs;
	int fresh; /* cs was taken in this round */
	int nomem;
	uint64_t queued;  /* MEMORY bytes of objects queued for offload: going soon */
	int queue_full;	  /* an offload queue refused a task in this round */
	size_t dropped;	  /* evicted without a copy in this round */
	int may_drop;	  /* a put waited for the disk in vain: objects may go uncopied */
	int alloc_failed; /* the round runs for a put whose allocation failed */
};

static int candidate(const struct mst_object *o, uint64_t now)
{
	return o->state == MST_ST_COMPLETE && !o->hard_pin && !mst_obj_busy(o) &&
	       o->lease_ms <= now && o->nrep > 0 && !o->offload_to;
}

static int soft_pinned(const struct mst_object *o, uint64_t now)
{
	return o->soft_pin_ms > now;
}

static int census_push(struct mst_cand_list *c, const struct mst_object *o)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 1024;
		struct mst_cand *v = realloc(c->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = (struct mst_cand){o->used_ms, o->id, o->hash, o};
	return 0;
}

static int visit_census(struct mst_master *m, struct mst_object *o, void *arg)
{
	struct census_arg *a = arg;
	struct mst_cand_list *c = soft_pinned(o, a->now) ? &a->cs->soft : &a->cs->plain;

	(void)m;
	if (!candidate(o, a->now) || (c == &a->cs->soft && !a->soft_too))
		return 0;
	if (census_push(c, o)) {
		a->nomem = 1;
		return -1;
	}
	return 0;
}

static void swap(struct mst_cand *a, struct mst_cand *b)
{
	struct mst_cand t = *a;

	*a = *b;
	*b = t;
}

/* Reorder v so that v[0..k) hold the k least recently used (quickselect,
 * Lomuto partition around a middle pivot; expected O(n)). */
static void select_oldest(struct mst_cand *v, size_t n, size_t k)
{
	size_t lo = 0, hi = n;

	while (k > lo && k < hi && hi - lo > 1) {
		size_t p = lo, mid = lo + (hi - lo) / 2;
		uint64_t pivot = v[mid].used_ms;

		swap(&v[mid], &v[hi - 1]);
		for (size_t i = lo; i < hi - 1; i++)
			if (v[i].used_ms < pivot)
				swap(&v[i], &v[p++]);
		swap(&v[p], &v[hi - 1]);
		if (p + 1 == k || p == k)
			return;
		if (p > k)
			hi = p;
		else
			lo = p + 1;
	}
}

/*
 * With --offload on_evict, queue the candidate o for its disk copy (it stays
 * until the copy exists): 1 when queued or kept, 0 when it should go now
 * without a copy. Once a queue is full the round queues nothing more (each
 * try would be refused too); the candidate then stays, unless a put is
 * waiting for room (or --offload-force-evict): the disk is behind, and the
 * least recently used object goes rather than the newest put being
 * refused. What is queued is the least recently used too, so the objects
 * dropped are the next oldest: those least likely to be read again.
 */
static int offload_keeps(struct mst_master *m, struct mst_object *o, struct census_arg *a)
{
	int rc = a->queue_full ? -ENOSPC : mst_offload_queue(m, o, 1);

	if (rc == 0) {
		for (unsigned i = 0; i < o->nrep; i++)
			a->queued += o->reps[i].len;
		return 1;
	}
	if (rc == -ENOSPC) {
		a->queue_full = 1;
		if (!m->cfg.offload_force_evict && !a->may_drop)
			return 1;
		lc_fetch_add_relaxed(&m->ctr.offload_dropped, 1);
		a->dropped++;
	}
	return 0;
}

/* The round can do nothing more: the queue is full and nothing (more) may
 * go without its copy. For a waiting put, one chunk of a round goes: room
 * for the put, not a sweep down to the low mark, which would drop objects
 * the disk is about to take. */
static int stalled(const struct mst_master *m, const struct census_arg *a)
{
	if (!a->queue_full || m->cfg.offload_force_evict)
		return 0;
	return !a->may_drop || a->dropped >= (a->cs->k ? a->cs->k : 1);
}

/*
 * What eviction does with the candidate *pp: 1 when its MEMORY went (the
 * object too, unless it lives on a LOCAL_DISK replica), 0 when it stays
 * (offload_keeps).
 */
static int evict_obj(struct mst_master *m, struct mst_shard *s, struct mst_object **pp,
		     struct census_arg *a)
{
	struct mst_object *o = *pp;
	uint64_t bytes = 0;

	if (o->ndisk) {
		mst_obj_drop_memory(m, o);
		return 1;
	}
	if (m->cfg.enable_offload && m->cfg.offload == MST_OFFLOAD_ON_EVICT && !o->offload_failed &&
	    offload_keeps(m, o, a))
		return 0;
	for (unsigned i = 0; i < o->nrep; i++)
		bytes += o->reps[i].len;
	mst_obj_erase(m, s, pp);
	lc_fetch_add_relaxed(&m->ctr.evictions, 1);
	lc_fetch_add_relaxed(&m->ctr.evicted_bytes, bytes);
	return 1;
}

/* Evict one census entry if it is still there, still a candidate and not
 * used since the census. */
static uint64_t evict_one(struct mst_master *m, const struct mst_cand *c, struct census_arg *a)
{
	struct mst_shard *s = &m->shards[c->hash % MST_SHARDS];
	struct mst_object **pp;
	int n = 0;

	pthread_mutex_lock(&s->lock);
	pp = mst_obj_find_id(s, c->hash, c->o, c->id);
	if (pp && (*pp)->used_ms == c->used_ms && candidate(*pp, a->now))
		n = evict_obj(m, s, pp, a);
	pthread_mutex_unlock(&s->lock);
	return (uint64_t)n;
}

/* Evict the k oldest of c and take them off it; the number evicted. */
static int64_t evict_oldest(struct mst_master *m, struct mst_cand_list *c, size_t k,
			    struct census_arg *a)
{
	struct mst_cand *v = c->v + c->off;
	size_t left = c->n - c->off;
	int64_t n = 0;

	if (k > left)
		k = left;
	select_oldest(v, left, k);
	for (size_t i = 0; i < k; i++) {
		if (i + MST_PREFETCH_AHEAD < k)
			mst_obj_prefetch(v[i + MST_PREFETCH_AHEAD].o);
		n += (int64_t)evict_one(m, &v[i], a);
	}
	c->off += k; /* the rest stays for the next chunk */
	return n;
}

static size_t left(const struct mst_census *cs)
{
	return cs->plain.n - cs->plain.off + cs->soft.n - cs->soft.off;
}

/* A new census at a->now. */
static void take_census(struct mst_master *m, struct census_arg *a)
{
	struct mst_census *cs = a->cs;
	size_t total;

	cs->plain.n = cs->plain.off = cs->soft.n = cs->soft.off = 0;
	a->fresh = 1;
	a->nomem = 0;
	lc_fetch_add_relaxed(&m->ctr.evict_censuses, 1);
	for (size_t i = 0; i < MST_SHARDS && !a->nomem; i++)
		mst_shard_sweep(m, i, visit_census, a);
	if (a->nomem)
		LC_WARN("master", "eviction census out of memory: partial round");
	total = cs->plain.n + cs->soft.n;
	cs->k = (size_t)ceil((double)total * m->cfg.eviction_ratio);
	cs->taken_ms = a->nomem ? 0 : a->now; /* a partial census is not kept */
}

/*
 * At the end of the round that took it: keep, of the census's unpinned
 * candidates left, those used a lease TTL before it (the oldest few rounds'
 * worth), and nothing else. None may be left: then later rounds take a
 * census of their own, as they would without keeping.
 */
static void keep_census(struct mst_master *m, struct mst_census *cs)
{
	size_t keep = CENSUS_KEEP_ROUNDS * cs->k > CENSUS_KEEP_MIN ? CENSUS_KEEP_ROUNDS * cs->k
								   : CENSUS_KEEP_MIN;
	uint64_t ttl = m->cfg.kv_lease_ttl_ms;
	uint64_t before = cs->taken_ms > ttl ? cs->taken_ms - ttl : 0;
	struct mst_cand_list *c = &cs->plain;
	size_t n = 0;

	free(cs->soft.v);
	cs->soft = (struct mst_cand_list){0};
	for (size_t i = c->off; i < c->n; i++)
		if (c->v[i].used_ms < before)
			c->v[n++] = c->v[i];
	c->off = 0;
	c->n = n;
	if (n > keep) {
		select_oldest(c->v, n, keep);
		c->n = keep;
	}
	if (!c->n) {
		free(c->v);
		*c = (struct mst_cand_list){0};
	}
}

/* Whether the kept census may serve a round at now (which may be a little
 * behind the time it was taken at: a round reads the clock before it waits
 * for the one that took it). */
static int census_kept(const struct mst_census *cs, uint64_t now)
{
	return cs->taken_ms && (now <= cs->taken_ms || now - cs->taken_ms < CENSUS_MAX_AGE_MS) &&
	       left(cs);
}

/* Up to k more: from the kept census while it has any, then from a new one
 * (one a round), unpinned first. */
static int64_t evict_chunk(struct mst_master *m, struct census_arg *a, size_t k)
{
	struct mst_census *cs = a->cs;
	int64_t n = 0;

	while ((size_t)n < k && !stalled(m, a)) {
		struct mst_cand_list *c = cs->plain.off < cs->plain.n ? &cs->plain
					  : cs->soft.off < cs->soft.n ? &cs->soft
								      : NULL;

		if (c) {
			n += evict_oldest(m, c, k - (size_t)n, a);
		} else if (!a->fresh) {
			take_census(m, a);
		} else {
			break;
		}
	}
	return n;
}

static uint64_t used(struct mst_master *m)
{
	return LC_READ_ONCE(m->used);
}

static double watermark(struct mst_master *m)
{
	return m->cfg.eviction_high_watermark_ratio * (double)LC_READ_ONCE(m->capacity);
}

static int64_t round_locked(struct mst_master *m, struct census_arg *a)
{
	double low = (1.0 - m->cfg.eviction_ratio) * watermark(m);
	int pressure;
	size_t k;
	int64_t n;

	a->alloc_failed = lc_xchg_relaxed(&m->alloc_failed, 0);
	pressure = a->alloc_failed || (double)used(m) > watermark(m);

	if (!census_kept(a->cs, a->now))
		take_census(m, a);
	k = a->cs->k;
	if (!k && left(a->cs) && pressure)
		k = 1;
	n = evict_chunk(m, a, k);
	while (pressure && (double)used(m) - (double)a->queued > low &&
	       (left(a->cs) || !a->fresh) && !stalled(m, a))
		n += evict_chunk(m, a, k);
	return n;
}

/* A whole round; the eviction lock held. may_drop: see census_arg. */
static int64_t evict_round_locked(struct mst_master *m, uint64_t now, int may_drop)
{
	struct census_arg a = {.now = now,
			       .soft_too = m->cfg.allow_evict_soft_pinned,
			       .cs = &m->census,
			       .may_drop = may_drop};
	int64_t n = round_locked(m, &a);

	if (a.fresh)
		keep_census(m, &m->census);
	/* release: pairs with the lc_load_acquire of evict_gen in mst_room_begin,
	 * mst_room_make and after_failure, so a caller that sees the new round sees its
	 * frees. A round that freed nothing is no news to a waiting put. */
	if (n)
		lc_fetch_add_release(&m->evict_gen, 1);
	lc_fetch_add_relaxed(&m->ctr.evict_rounds, 1);
	if (n)
		LC_DEBUG("master", "eviction round: %lld objects", (long long)n);
	return n;
}

int64_t mst_evict_round(struct mst_master *m, uint64_t now)
{
	int64_t n;

	pthread_mutex_lock(&m->evict_lock);
	n = evict_round_locked(m, now, 0);
	pthread_mutex_unlock(&m->evict_lock);
	return n;
}

void mst_evict_maybe(struct mst_master *m)
{
	if (LC_READ_ONCE(m->alloc_failed) || (double)used(m) > watermark(m))
		mst_evict_round(m, lc_now_ms());
}

int mst_put_may_wait(struct mst_master *m, uint64_t len)
{
	return LC_READ_ONCE(m->alloc_failed) || used(m) + len > LC_READ_ONCE(m->capacity);
}

/* What after_failure did: nothing that could help, a round that freed
 * memory (or another one's since the failure), or a wait that saw a disk
 * copy end (which frees memory unless its object was read meanwhile). */
enum { ROOM_NONE = 1, ROOM_FREED, ROOM_COPIED };

/*
 * An allocation failed after gen rounds had run: a round unless another
 * completed meanwhile. With --offload on_evict and nothing freed, a wait
 * until deadline (monotonic ms) for a disk copy to end (ROOM_COPIED only
 * before it); past it, or at once when no copy is queued or in flight, a
 * round that lets objects go uncopied.
 */
static int after_failure(struct mst_master *m, uint64_t gen, uint64_t deadline)
{
	uint64_t now;
	int again;

	LC_WRITE_ONCE(m->alloc_failed, 1);
	pthread_mutex_lock(&m->evict_lock);
	/* a round that ended after our failure may have made the room already */
	/* acquire: pairs with lc_fetch_add_release in evict_round_locked */
	again = lc_load_acquire(&m->evict_gen) != gen;
	if (!again)
		again = evict_round_locked(m, lc_now_ms(), 0) > 0;
	pthread_mutex_unlock(&m->evict_lock);
	if (again)
		return ROOM_FREED;
	if (!m->cfg.enable_offload || m->cfg.offload != MST_OFFLOAD_ON_EVICT)
		return ROOM_NONE;
	/* What could go is waiting for its disk copy: the put waits for one
	 * rather than an object going uncopied; if the disk is stalled, the
	 * least recently used go without their copy. */
	now = lc_now_ms();
	if (now < deadline && mst_offload_wait(m, deadline - now))
		return ROOM_COPIED;
	LC_WRITE_ONCE(m->alloc_failed, 1);
	pthread_mutex_lock(&m->evict_lock);
	again = evict_round_locked(m, lc_now_ms(), 1) > 0;
	pthread_mutex_unlock(&m->evict_lock);
	return again ? ROOM_FREED : ROOM_NONE;
}

void mst_room_begin(struct mst_master *m, struct mst_room *r)
{
	/* acquire: pairs with lc_fetch_add_release in evict_round_locked */
	r->gen = lc_load_acquire(&m->evict_gen);
	r->deadline = 0;
	r->last = 0;
}

int mst_room_make(struct mst_master *m, struct mst_room *r, uint64_t len)
{
	/* a round's room taken (or too scattered for len): refused, as the
	 * next put makes its own round; an ended copy that left no room: the
	 * wait goes on for the next */
	if (r->last && r->last != ROOM_COPIED)
		return 0;
	if (!r->last) {
		/* never for a value no segment could hold: eviction cannot help */
		if (!LC_READ_ONCE(m->capacity) || !mst_segments_could_hold(m, len))
			return 0;
		r->deadline = lc_now_ms() + m->cfg.offload_put_wait_ms;
	}
	r->last = after_failure(m, r->gen, r->deadline);
	r->gen = lc_load_acquire(&m->evict_gen);
	return r->last != ROOM_NONE;
}

void mst_evict_fini(struct mst_master *m)
{
	free(m->census.plain.v);
	free(m->census.soft.v);
}
