/*
 * segments.c - mounted DRAM segments and replica placement. Each segment has
 * its own range allocator under its own lock; the table of segments is read
 * by placement and written only by mount and unmount. See mst_int.h for the
 * lock order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "mst_int.h"
#include "ralloc.h"

#define SEG_ALIGN 64 /* cache-line aligned ranges */

int mst_segtab_init(struct mst_segtab *t)
{
	memset(t, 0, sizeof(*t));
	return -pthread_rwlock_init(&t->lock, NULL);
}

static void segment_free(struct mst_segment *s)
{
	if (!s)
		return;
	lc_ralloc_destroy(s->ra);
	pthread_mutex_destroy(&s->lock);
	auth_key_wipe(&s->secret);
	free(s->endpoint);
	free(s->name);
	free(s);
}

void mst_segtab_fini(struct mst_master *m)
{
	for (size_t i = 0; i < m->segs.n; i++)
		segment_free(m->segs.v[i]);
	free(m->segs.v);
	pthread_rwlock_destroy(&m->segs.lock);
}

static struct mst_segment *segment_alloc(uint64_t owner, const Lunar__SegmentDesc *d)
{
	struct mst_segment *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->owner = owner;
	s->size = d->size;
	s->name = strdup(d->name);
	s->endpoint = strdup(d->endpoint ? d->endpoint : "");
	s->ra = lc_ralloc_create(d->size, SEG_ALIGN);
	auth_random(s->secret.k, sizeof(s->secret.k));
	/* Never 0 (no mount) nor all ones (an owner between mounts). */
	do
		auth_random(&s->mount, sizeof(s->mount));
	while (s->mount == 0 || s->mount == UINT64_MAX);
	if (!s->name || !s->endpoint || !s->ra || pthread_mutex_init(&s->lock, NULL)) {
		lc_ralloc_destroy(s->ra);
		free(s->endpoint);
		free(s->name);
		free(s);
		return NULL;
	}
	return s;
}

/* Index of the segment called name, or -1. Call with the table lock held. */
static ssize_t segtab_find(const struct mst_segtab *t, const char *name)
{
	for (size_t i = 0; i < t->n; i++)
		if (!strcmp(t->v[i]->name, name))
			return (ssize_t)i;
	return -1;
}

/* Take segment i out of the table. Call with the table write-locked.
 * (The count is also read unlocked: mst_rebuild_settling.) */
static struct mst_segment *segtab_take(struct mst_master *m, size_t i)
{
	struct mst_segment *s = m->segs.v[i];

	m->segs.v[i] = m->segs.v[m->segs.n - 1];
	LC_WRITE_ONCE(m->segs.n, m->segs.n - 1);
	return s;
}

/* Forget a segment already out of the table: drop the replicas on it, erase
 * objects left without any, then free it. */
static void segment_retire(struct mst_master *m, struct mst_segment *s)
{
	mst_objects_drop(m, s, NULL, 0, 0);
	mst_resv_drop_segment(m, s);	 /* before deferred: an expiry may move ranges there */
	mst_deferred_drop_segment(m, s); /* after the objects: see deferred.c */
	lc_fetch_sub_relaxed(&m->capacity, s->size);
	lc_fetch_sub_relaxed(&m->used, s->used);
	LC_INFO("master", "segment %s unmounted", s->name);
	segment_free(s);
}

static int segtab_add(struct mst_segtab *t, struct mst_segment *s)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		struct mst_segment **v = realloc(t->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n] = s;
	LC_WRITE_ONCE(t->n, t->n + 1); /* as segtab_take */
	return 0;
}

/* Segments of client in the table; with the table lock held. */
static unsigned owned_locked(struct mst_master *m, uint64_t client)
{
	unsigned n = 0;

	for (size_t i = 0; i < m->segs.n; i++)
		n += m->segs.v[i]->owner == client;
	return n;
}

int mst_segment_mount(struct mst_master *m, uint64_t client, const Lunar__SegmentDesc *d,
		      struct auth_key *secret, uint64_t *mount)
{
	struct mst_segment *s, *stale = NULL;
	ssize_t i;
	int rc;

	/* Names are copied into every replica of every reply: kept short. */
	if (!d || !d->name || !d->name[0] || !d->size ||
	    strnlen(d->name, MST_SEGMENT_NAME_MAX + 1) > MST_SEGMENT_NAME_MAX ||
	    (d->endpoint && strnlen(d->endpoint, MST_SEGMENT_NAME_MAX + 1) > MST_SEGMENT_NAME_MAX))
		return LUNAR_ERR_INVALID_PARAMS;
	s = segment_alloc(client, d);
	if (!s)
		return -ENOMEM;
	pthread_rwlock_wrlock(&m->segs.lock);
	i = segtab_find(&m->segs, d->name);
	if (i >= 0 && m->segs.v[i]->owner == client) {
		rc = 0; /* idempotent remount; it also ends a graceful unmount */
		m->segs.v[i]->drain_due_ms = 0;
		if (secret)
			*secret = m->segs.v[i]->secret;
		if (mount)
			*mount = m->segs.v[i]->mount;
		goto out_unlock;
	}
	if (i >= 0 && mst_client_alive(m, m->segs.v[i]->owner)) {
		rc = LUNAR_ERR_SEGMENT_ALREADY_EXISTS;
		goto out_unlock;
	}
	/* Each segment costs the master its allocator's tables: one client
	 * cannot run it out of memory with mounts. */
	if (owned_locked(m, client) >= MST_SEGMENTS_PER_CLIENT) {
		rc = LUNAR_ERR_NO_AVAILABLE_HANDLE;
		goto out_unlock;
	}
	if (i >= 0)
		stale = segtab_take(m, (size_t)i); /* its dead owner's leftovers */
	rc = segtab_add(&m->segs, s);
	if (!rc) {
		mst_rebuild_heard(m); /* a new leader waits for its report */
		if (secret)
			*secret = s->secret;
		if (mount)
			*mount = s->mount;
		lc_fetch_add_relaxed(&m->capacity, s->size);
		s = NULL;
	}
out_unlock:
	pthread_rwlock_unlock(&m->segs.lock);
	segment_free(s);
	if (stale)
		segment_retire(m, stale);
	if (!rc)
		LC_DEBUG("master", "segment %s (%llu bytes) mounted by %016llx", d->name,
			 (unsigned long long)d->size, (unsigned long long)client);
	return rc;
}

int mst_segment_secret(struct mst_master *m, const char *name, struct auth_key *out)
{
	ssize_t i;

	pthread_rwlock_rdlock(&m->segs.lock);
	i = segtab_find(&m->segs, name);
	if (i >= 0)
		*out = m->segs.v[i]->secret;
	pthread_rwlock_unlock(&m->segs.lock);
	return i >= 0 ? 0 : -ENOENT;
}

int mst_segment_unmount(struct mst_master *m, uint64_t client, const char *name, uint64_t grace_ms)
{
	struct mst_segment *s = NULL;
	ssize_t i;
	int rc = 0;

	if (!name || !name[0])
		return LUNAR_ERR_INVALID_PARAMS;
	pthread_rwlock_wrlock(&m->segs.lock);
	i = segtab_find(&m->segs, name);
	if (i < 0)
		rc = LUNAR_ERR_SEGMENT_NOT_FOUND;
	else if (m->segs.v[i]->owner != client)
		rc = LUNAR_ERR_ILLEGAL_CLIENT;
	else if (grace_ms)
		m->segs.v[i]->drain_due_ms = lc_now_ms() + grace_ms; /* readable, no new data */
	else
		s = segtab_take(m, (size_t)i);
	pthread_rwlock_unlock(&m->segs.lock);
	if (s)
		segment_retire(m, s);
	return rc;
}

/* Take the first segment out of the table that take() picks; NULL if none. */
static struct mst_segment *segtab_take_if(struct mst_master *m,
					  int (*take)(const struct mst_segment *, uint64_t),
					  uint64_t arg)
{
	struct mst_segment *s = NULL;

	pthread_rwlock_wrlock(&m->segs.lock);
	for (size_t i = 0; i < m->segs.n && !s; i++)
		if (take(m->segs.v[i], arg))
			s = segtab_take(m, i);
	pthread_rwlock_unlock(&m->segs.lock);
	return s;
}

static int owned_by(const struct mst_segment *s, uint64_t client)
{
	return s->owner == client;
}

static int drained_by(const struct mst_segment *s, uint64_t now)
{
	return s->drain_due_ms && s->drain_due_ms <= now;
}

void mst_segments_drop_client(struct mst_master *m, uint64_t client)
{
	struct mst_segment *s;

	while ((s = segtab_take_if(m, owned_by, client)))
		segment_retire(m, s);
}

void mst_segments_drain_sweep(struct mst_master *m, uint64_t now)
{
	struct mst_segment *s;

	while ((s = segtab_take_if(m, drained_by, now)))
		segment_retire(m, s);
}

static Lunar__SegmentInfo *segment_info(const struct mst_segment *s)
{
	Lunar__SegmentInfo *si = malloc(sizeof(*si));

	if (!si)
		return NULL;
	lunar__segment_info__init(si);
	si->name = strdup(s->name);
	si->endpoint = strdup(s->endpoint);
	si->owner = s->owner;
	si->size = s->size;
	si->used = mst_segment_used(s);
	si->reserved = LC_READ_ONCE(s->reserved);
	si->draining = s->drain_due_ms != 0;
	if (!si->name || !si->endpoint) {
		protobuf_c_message_free_unpacked(&si->base, NULL);
		return NULL;
	}
	return si;
}

int mst_segments_list(struct mst_master *m, Lunar__ListSegmentsReply *r)
{
	int rc = 0;

	pthread_rwlock_rdlock(&m->segs.lock);
	r->segments = calloc(m->segs.n + 1, sizeof(*r->segments));
	if (!r->segments)
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < m->segs.n; i++) {
		r->segments[i] = segment_info(m->segs.v[i]);
		if (!r->segments[i])
			rc = -ENOMEM;
		else
			r->n_segments = i + 1;
	}
	pthread_rwlock_unlock(&m->segs.lock);
	return rc;
}

int mst_segment_of_client(struct mst_master *m, uint64_t client, char **name, char **endpoint)
{
	int rc = LUNAR_ERR_SEGMENT_NOT_FOUND;

	*name = *endpoint = NULL;
	pthread_rwlock_rdlock(&m->segs.lock);
	for (size_t i = 0; i < m->segs.n; i++) {
		if (m->segs.v[i]->owner != client)
			continue;
		*name = strdup(m->segs.v[i]->name);
		*endpoint = strdup(m->segs.v[i]->endpoint);
		rc = *name && *endpoint ? 0 : -ENOMEM;
		break;
	}
	pthread_rwlock_unlock(&m->segs.lock);
	if (rc) {
		free(*name);
		free(*endpoint);
		*name = *endpoint = NULL;
	}
	return rc;
}

unsigned mst_segments_owned(struct mst_master *m, uint64_t client)
{
	unsigned n;

	pthread_rwlock_rdlock(&m->segs.lock);
	n = owned_locked(m, client);
	pthread_rwlock_unlock(&m->segs.lock);
	return n;
}

/* Allocate on s; 0 and *r, or -ENOSPC / -ENOMEM. */
static int segment_get(struct mst_master *m, struct mst_segment *s, uint64_t len,
		       struct mst_replica *r)
{
	uint64_t got = 0;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	r->range = lc_ralloc_take(s->ra, len, &r->off, &rc);
	if (r->range) {
		got = lc_ralloc_round(s->ra, len);
		LC_WRITE_ONCE(s->used, s->used + got);
	}
	pthread_mutex_unlock(&s->lock);
	if (!r->range)
		return rc;
	r->seg = s;
	r->len = len; /* the object's bytes; the rounding stays in the allocator */
	lc_fetch_add_relaxed(&m->used, got);
	return 0;
}

int mst_segment_take_at(struct mst_master *m, const char *name, uint64_t off, uint64_t len,
			struct mst_replica *r)
{
	struct mst_segment *s;
	ssize_t i;
	int rc = 0;

	pthread_rwlock_rdlock(&m->segs.lock);
	i = segtab_find(&m->segs, name);
	if (i < 0) {
		pthread_rwlock_unlock(&m->segs.lock);
		return LUNAR_ERR_SEGMENT_NOT_FOUND;
	}
	s = m->segs.v[i];
	pthread_mutex_lock(&s->lock);
	r->range = lc_ralloc_take_at(s->ra, off, len, &rc);
	if (r->range) {
		uint64_t round = lc_ralloc_round(s->ra, len);

		LC_WRITE_ONCE(s->used, s->used + round);
		lc_fetch_add_relaxed(&m->used, round);
		r->seg = s;
		r->off = off;
		r->len = len;
	}
	pthread_mutex_unlock(&s->lock);
	pthread_rwlock_unlock(&m->segs.lock);
	return r->range ? 0 : rc;
}

uint64_t mst_segment_used(const struct mst_segment *s)
{
	uint64_t used = LC_READ_ONCE(s->used), resv = LC_READ_ONCE(s->reserved);

	return used > resv ? used - resv : 0; /* two reads: clamped */
}

int mst_segment_live(struct mst_master *m, const struct mst_segment *s)
{
	for (size_t i = 0; i < m->segs.n; i++)
		if (m->segs.v[i] == s)
			return 1;
	return 0;
}

void mst_replica_free(struct mst_master *m, const struct mst_replica *r)
{
	struct mst_segment *s = r->seg;
	uint64_t len;

	pthread_mutex_lock(&s->lock);
	LC_ASSERT(lc_ralloc_give(s->ra, r->range, &len) == 0);
	LC_WRITE_ONCE(s->used, s->used - len);
	pthread_mutex_unlock(&s->lock);
	lc_fetch_sub_relaxed(&m->used, len);
}

/* A cheap per-thread random number for the random strategy. */
static uint64_t rnd(void)
{
	static __thread uint64_t x;

	if (!x)
		x = lc_now_ns() ^ (uint64_t)(uintptr_t)&x ^ 0x9e3779b97f4a7c15ull;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return x;
}

/* Free share of s, for free_ratio_first. */
static double free_ratio(const struct mst_segment *s)
{
	return 1.0 - (double)LC_READ_ONCE(s->used) / (double)s->size;
}

struct placer {
	struct mst_master *m;
	uint64_t client, len;
	unsigned want, got;
	unsigned char *tried; /* per table index */
	struct mst_replica *out;
	int nomem;
};

/* Try segment i unless already tried; 1 if a replica was placed there. */
static int try_segment(struct placer *p, size_t i)
{
	int rc;

	if (p->tried[i] || p->got == p->want)
		return 0;
	p->tried[i] = 1;
	if (p->m->segs.v[i]->drain_due_ms)
		return 0; /* unmounting: readable, but no new data */
	rc = segment_get(p->m, p->m->segs.v[i], p->len, &p->out[p->got]);
	if (rc == -ENOMEM)
		p->nomem = 1;
	if (rc)
		return 0;
	p->got++;
	return 1;
}

/* The untried segment with the largest free share, or -1. */
static ssize_t most_free(const struct placer *p)
{
	ssize_t best = -1;

	for (size_t i = 0; i < p->m->segs.n; i++)
		if (!p->tried[i] && !p->m->segs.v[i]->drain_due_ms &&
		    (best < 0 || free_ratio(p->m->segs.v[i]) > free_ratio(p->m->segs.v[best])))
			best = (ssize_t)i;
	return best;
}

static void place_by_strategy(struct placer *p)
{
	size_t n = p->m->segs.n, start;
	ssize_t i;

	switch (p->m->cfg.strategy) {
	case MST_ALLOC_FREE_RATIO_FIRST:
		while (p->got < p->want && (i = most_free(p)) >= 0)
			try_segment(p, (size_t)i);
		return;
	case MST_ALLOC_LOCAL_FIRST:
		for (size_t j = 0; j < n; j++)
			if (p->m->segs.v[j]->owner == p->client)
				try_segment(p, j);
		break;
	case MST_ALLOC_RANDOM: break;
	}
	start = n ? (size_t)(rnd() % n) : 0;
	for (size_t j = 0; j < n && p->got < p->want; j++)
		try_segment(p, (start + j) % n);
}

int mst_segments_could_hold(struct mst_master *m, uint64_t len)
{
	int yes = 0;

	pthread_rwlock_rdlock(&m->segs.lock);
	for (size_t i = 0; i < m->segs.n && !yes; i++)
		yes = !m->segs.v[i]->drain_due_ms && m->segs.v[i]->size >= len;
	pthread_rwlock_unlock(&m->segs.lock);
	return yes;
}

uint64_t mst_segments_largest(struct mst_master *m)
{
	uint64_t most = 0;

	pthread_rwlock_rdlock(&m->segs.lock);
	for (size_t i = 0; i < m->segs.n; i++)
		if (!m->segs.v[i]->drain_due_ms && m->segs.v[i]->size > most)
			most = m->segs.v[i]->size;
	pthread_rwlock_unlock(&m->segs.lock);
	return most;
}

int mst_place(struct mst_master *m, uint64_t client, uint64_t len, unsigned want,
	      char *const *preferred, size_t npreferred, struct mst_replica *out)
{
	struct placer p = {.m = m, .client = client, .len = len, .want = want, .out = out};
	ssize_t i;

	if (mst_rebuild_settling(m)) /* HA: reported ranges first */
		return LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
	pthread_rwlock_rdlock(&m->segs.lock);
	p.tried = calloc(m->segs.n + 1, 1);
	if (!p.tried) {
		pthread_rwlock_unlock(&m->segs.lock);
		return -ENOMEM;
	}
	for (size_t k = 0; k < npreferred && p.got < want; k++)
		if ((i = segtab_find(&m->segs, preferred[k])) >= 0)
			try_segment(&p, (size_t)i);
	place_by_strategy(&p);
	pthread_rwlock_unlock(&m->segs.lock);
	free(p.tried);
	if (p.got)
		return (int)p.got;
	return p.nomem ? -ENOMEM : LUNAR_ERR_NO_AVAILABLE_HANDLE;
}
