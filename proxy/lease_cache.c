/*
 * lease_cache.c - a sharded hash of leased replica lists; see lease_cache.h.
 * Each shard is a mutex, an open-addressing table of (hash, entry) slots
 * probed linearly and kept at most half full (a lookup reads one line of
 * the table and only the entries whose hash matches; a removal moves the
 * rest of its probe run back, so there are no tombstones), and its entries
 * in the order their leases were granted: a full shard drops the entry
 * leased longest ago, which under one lease TTL is the one whose lease ends
 * first (or has ended), also when its entries' bytes pass the shard's
 * budget. Every operation but clear, renew and orphan is O(1); renew and
 * orphan visit only the entries they may act on.
 */
#include "lease_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "key.h"

#define SHARDS 64

/* Only the replicas an entry has are stored (most objects have one; a
 * full px_cached is over 700 bytes), then its name "tenant\0key\0". */
struct entry {
	struct entry *older, *newer; /* the shard's lease order */
	uint64_t hash;
	char *name;
	size_t tlen;
	size_t bytes; /* as allocated */
	bool read;
	unsigned cap; /* room in rep[] */
	uint64_t size;
	uint64_t deadline_ms;
	uint64_t seq;		  /* the number of the grant it holds */
	uint64_t lessee;	  /* the reader that grant named */
	uint64_t reader;	  /* the latest reader; 0 none */
	uint64_t reader_until_ms; /* what its reads need */
	uint64_t others_ms;	  /* what every other reader's reads need */
	uint32_t crc;
	unsigned nrep;
	struct px_cached_replica rep[];
};

struct slot {
	uint64_t hash;
	struct entry *e; /* NULL: empty */
};

struct shard {
	pthread_mutex_t lock;
	unsigned count;
	size_t bytes;	  /* of its entries */
	uint64_t lost_ms; /* what reads of entries dropped from it needed */
	uint64_t dropped; /* the number of its latest drop or clear */
	struct entry *oldest, *newest;
	struct slot *tab; /* mask + 1 slots */
};

struct px_lease_cache {
	unsigned per_shard;
	size_t shard_bytes;	    /* the budget of a shard's entries */
	unsigned mask;		    /* table slots per shard - 1: at least twice per_shard */
	atomic_uint_fast64_t drops; /* drop and clear calls so far: each is numbered */
	struct shard s[SHARDS];
};

static uint64_t name_hash(const char *tenant, const char *key)
{
	return lc_name_hash(tenant, strlen(tenant), key, strlen(key));
}

static struct shard *shard_of(struct px_lease_cache *c, uint64_t h)
{
	return &c->s[h % SHARDS];
}

static unsigned home(const struct px_lease_cache *c, uint64_t h)
{
	return (unsigned)(h / SHARDS) & c->mask;
}

/* The slot holding (tenant, key), else the empty slot ending its probe. */
static unsigned find(const struct px_lease_cache *c, const struct shard *s, uint64_t h,
		     const char *tenant, const char *key)
{
	unsigned i = home(c, h);

	for (; s->tab[i].e; i = (i + 1) & c->mask) {
		const struct entry *e = s->tab[i].e;

		if (s->tab[i].hash == h && !strcmp(e->name, tenant) &&
		    !strcmp(e->name + e->tlen + 1, key))
			break;
	}
	return i;
}

/* The slot holding e, which is in the table. */
static unsigned find_entry(const struct px_lease_cache *c, const struct shard *s,
			   const struct entry *e)
{
	unsigned i = home(c, e->hash);

	while (s->tab[i].e != e)
		i = (i + 1) & c->mask;
	return i;
}

/* Empty slot i, moving back each later slot of the run whose probe from
 * its home passes i. */
static void slot_clear(const struct px_lease_cache *c, struct shard *s, unsigned i)
{
	for (unsigned j = (i + 1) & c->mask; s->tab[j].e; j = (j + 1) & c->mask) {
		unsigned k = home(c, s->tab[j].hash);

		if (((j - k) & c->mask) >= ((j - i) & c->mask)) {
			s->tab[i] = s->tab[j];
			i = j;
		}
	}
	s->tab[i].e = NULL;
}

static void order_unlink(struct shard *s, struct entry *e)
{
	if (e->older)
		e->older->newer = e->newer;
	else
		s->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		s->newest = e->older;
}

static void order_append(struct shard *s, struct entry *e)
{
	e->newer = NULL;
	e->older = s->newest;
	if (s->newest)
		s->newest->newer = e;
	else
		s->oldest = e;
	s->newest = e;
}

static void max_into(uint64_t *dst, uint64_t v)
{
	if (v > *dst)
		*dst = v;
}

/* Whether s saw a drop or clear since mark (px_lease_cache_mark; 0: no
 * mark). Under s's lock. */
static bool dropped_since(const struct shard *s, uint64_t mark)
{
	return mark && s->dropped >= mark;
}

/* Take the entry of slot i out of the table and the order, and free it;
 * what its reads still need stays with the shard. */
static void entry_remove(const struct px_lease_cache *c, struct shard *s, unsigned i)
{
	struct entry *e = s->tab[i].e;

	max_into(&s->lost_ms, e->reader_until_ms);
	max_into(&s->lost_ms, e->others_ms);
	slot_clear(c, s, i);
	order_unlink(s, e);
	s->bytes -= e->bytes;
	free(e);
	s->count--;
}

/* Drop the entries leased longest ago, but not keep, until the shard holds
 * no more than it may with extra more bytes and one more entry (keep: 0). */
static void make_room(const struct px_lease_cache *c, struct shard *s, size_t extra, unsigned more,
		      const struct entry *keep)
{
	while (s->oldest && s->oldest != keep &&
	       (s->count + more > c->per_shard || s->bytes + extra > c->shard_bytes))
		entry_remove(c, s, find_entry(c, s, s->oldest));
}

/* Store v in e, which has room for v->nrep replicas. */
static void entry_set(struct entry *e, const struct px_cached *v)
{
	e->size = v->size;
	e->deadline_ms = v->deadline_ms;
	e->seq = v->lease_seq;
	e->lessee = v->lessee;
	e->crc = v->crc;
	e->nrep = v->nrep;
	memcpy(e->rep, v->rep, v->nrep * sizeof(e->rep[0]));
}

/* A new entry for (tenant, key) holding v; NULL on ENOMEM. */
static struct entry *entry_new(uint64_t h, const char *tenant, const char *key,
			       const struct px_cached *v)
{
	size_t tl = strlen(tenant), kl = strlen(key);
	size_t bytes =
	    sizeof(struct entry) + v->nrep * sizeof(struct px_cached_replica) + tl + kl + 2;
	struct entry *e = malloc(bytes);

	if (!e)
		return NULL;
	e->bytes = bytes;
	e->name = (char *)&e->rep[v->nrep];
	memcpy(e->name, tenant, tl + 1);
	memcpy(e->name + tl + 1, key, kl + 1);
	e->tlen = tl;
	e->hash = h;
	e->read = false;
	e->reader = e->reader_until_ms = e->others_ms = 0;
	e->cap = v->nrep;
	entry_set(e, v);
	return e;
}

/* Note the read rd of e (none: a renewal). */
static void note_read(struct entry *e, const struct px_read *rd)
{
	if (!rd)
		return;
	if (e->reader != rd->reader) {
		max_into(&e->others_ms, e->reader_until_ms);
		e->reader = rd->reader;
		e->reader_until_ms = 0;
	}
	max_into(&e->reader_until_ms, rd->until_ms);
}

static void entry_get(const struct entry *e, struct px_cached *out)
{
	out->size = e->size;
	out->deadline_ms = e->deadline_ms;
	out->lease_seq = e->seq;
	out->crc = e->crc;
	out->landing = false;
	out->nrep = e->nrep;
	memcpy(out->rep, e->rep, e->nrep * sizeof(e->rep[0]));
}

/* Put v in the entry of slot i, moving it to the newest end of the order;
 * an entry without room is replaced (dropped if no memory is left). */
static void entry_update(const struct px_lease_cache *c, struct shard *s, unsigned i,
			 const struct px_cached *v)
{
	struct entry *e = s->tab[i].e, *n;

	if (e->cap < v->nrep) {
		n = entry_new(e->hash, e->name, e->name + e->tlen + 1, v);
		if (!n) {
			entry_remove(c, s, i);
			return;
		}
		n->read = e->read;
		n->reader = e->reader;
		n->reader_until_ms = e->reader_until_ms;
		n->others_ms = e->others_ms;
		s->tab[i].e = n;
		order_unlink(s, e);
		s->bytes += n->bytes - e->bytes;
		free(e);
		e = n;
	} else {
		order_unlink(s, e);
		entry_set(e, v);
	}
	order_append(s, e);
	make_room(c, s, 0, 0, e); /* it may have grown */
}

unsigned px_lease_cache_default_keys(uint64_t segment_size)
{
	uint64_t n = segment_size / PX_LEASE_BYTES_PER_KEY;

	return n < PX_LEASE_KEYS_MIN   ? PX_LEASE_KEYS_MIN
	       : n > PX_LEASE_KEYS_MAX ? PX_LEASE_KEYS_MAX
				       : (unsigned)n;
}

struct px_lease_cache *px_lease_cache_create(unsigned capacity)
{
	struct px_lease_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->per_shard = capacity / SHARDS ? capacity / SHARDS : 1;
	c->shard_bytes = (size_t)c->per_shard * PX_LEASE_ENTRY_BYTES;
	c->mask = 1;
	while (c->mask + 1 < 2 * c->per_shard)
		c->mask = 2 * c->mask + 1;
	for (int i = 0; i < SHARDS; i++) {
		c->s[i].tab = calloc(c->mask + 1, sizeof(*c->s[i].tab));
		if (!c->s[i].tab) {
			px_lease_cache_destroy(c);
			return NULL;
		}
		pthread_mutex_init(&c->s[i].lock, NULL);
	}
	return c;
}

void px_lease_cache_destroy(struct px_lease_cache *c)
{
	if (!c)
		return;
	for (int i = 0; i < SHARDS && c->s[i].tab; i++) {
		struct entry *e = c->s[i].oldest, *next;

		for (; e; e = next) {
			next = e->newer;
			free(e);
		}
		free(c->s[i].tab);
		pthread_mutex_destroy(&c->s[i].lock);
	}
	free(c);
}

int px_lease_cache_get(struct px_lease_cache *c, const char *tenant, const char *key,
		       uint64_t now_ms, uint64_t margin_ms, const struct px_read *rd,
		       struct px_cached *out)
{
	uint64_t h = name_hash(tenant, key);
	struct shard *s = shard_of(c, h);
	struct entry *e;
	int hit = 0;

	pthread_mutex_lock(&s->lock);
	e = s->tab[find(c, s, h, tenant, key)].e;
	if (e && e->deadline_ms > now_ms + margin_ms) {
		e->read = true;
		note_read(e, rd);
		entry_get(e, out);
		hit = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return hit;
}

int px_lease_cache_fill(const Lunar__GetReplicaListResult *res, uint64_t deadline_ms,
			uint64_t lessee, struct px_cached *out)
{
	unsigned n = 0;

	out->size = res->size;
	out->crc = res->crc32c;
	out->deadline_ms = deadline_ms;
	out->lease_seq = res->lease_seq;
	out->lessee = lessee;
	out->landing = res->landing;
	for (size_t i = 0; i < res->n_replicas && n < PX_CACHE_MAX_REPLICAS; i++) {
		const Lunar__Replica *rp = res->replicas[i];
		struct px_cached_replica *to = &out->rep[n];

		if (strnlen(rp->endpoint, PX_ENDPOINT_MAX) == PX_ENDPOINT_MAX)
			continue; /* no Lunar proxy has one (its --host check) */
		to->type = rp->type;
		strcpy(to->endpoint, rp->endpoint);
		to->offset = rp->offset;
		to->length = rp->length;
		to->has_cap = px_replica_cap(rp, &to->cap);
		n++;
	}
	out->nrep = n;
	return res->n_replicas && !n ? -1 : 0;
}

int px_replica_cap(const Lunar__Replica *rp, struct eng_cap *out)
{
	*out = (struct eng_cap){.mount = rp->mount};
	if (rp->cap.len != ENG_CAP_BYTES || !rp->cap.data)
		return rp->mount != 0; /* keyless: the mount alone */
	out->offset = rp->type == LUNAR__REPLICA_TYPE__LOCAL_DISK ? 0 : rp->offset;
	out->length = rp->length;
	out->version = rp->version;
	out->expiry_ms = rp->cap_expiry_ms;
	memcpy(out->tag, rp->cap.data, ENG_CAP_BYTES);
	return 1;
}

void px_lease_cache_put(struct px_lease_cache *c, const char *tenant, const char *key,
			const struct px_cached *v, const struct px_read *rd)
{
	uint64_t h = name_hash(tenant, key);
	struct shard *s = shard_of(c, h);
	struct entry *e;
	unsigned i;

	pthread_mutex_lock(&s->lock);
	if (rd && dropped_since(s, rd->mark)) {
		/* Asked for before a drop: it may be the value the drop was
		 * for. Kept neither way, so only the master's next word is. */
		max_into(&s->lost_ms, rd->until_ms);
		goto out;
	}
	i = find(c, s, h, tenant, key);
	if (v->landing) { /* its bytes may not be there yet: not kept */
		if (s->tab[i].e)
			entry_remove(c, s, i);
		if (rd)
			max_into(&s->lost_ms, rd->until_ms);
		goto out;
	}
	if (s->tab[i].e) {
		entry_update(c, s, i, v);
		i = find(c, s, h, tenant, key); /* without memory, it was dropped */
		if (s->tab[i].e)
			note_read(s->tab[i].e, rd);
		else if (rd)
			max_into(&s->lost_ms, rd->until_ms);
		goto out;
	}
	e = entry_new(h, tenant, key, v);
	if (!e) {
		if (rd)
			max_into(&s->lost_ms, rd->until_ms);
		goto out;
	}
	if (s->count >= c->per_shard || s->bytes + e->bytes > c->shard_bytes) {
		make_room(c, s, e->bytes, 1, NULL);
		i = find(c, s, h, tenant, key); /* the removals may have moved the run */
	}
	e->others_ms = s->lost_ms; /* the key may have had an entry, and readers */
	note_read(e, rd);
	s->tab[i] = (struct slot){h, e};
	order_append(s, e);
	s->count++;
	s->bytes += e->bytes;
out:
	pthread_mutex_unlock(&s->lock);
}

uint64_t px_lease_cache_mark(struct px_lease_cache *c)
{
	return atomic_load(&c->drops) + 1;
}

/* The number the next drop or clear takes: numbered before they lock a
 * shard, so a mark taken after holds for nothing they remove. */
static uint64_t drop_number(struct px_lease_cache *c)
{
	return atomic_fetch_add(&c->drops, 1) + 1;
}

void px_lease_cache_drop(struct px_lease_cache *c, const char *tenant, const char *key)
{
	uint64_t h = name_hash(tenant, key), n = drop_number(c);
	struct shard *s = shard_of(c, h);
	unsigned i;

	pthread_mutex_lock(&s->lock);
	max_into(&s->dropped, n);
	i = find(c, s, h, tenant, key);
	if (s->tab[i].e)
		entry_remove(c, s, i);
	pthread_mutex_unlock(&s->lock);
}

typedef void (*visit_fn)(struct px_lease_cache *c, struct shard *s, struct entry *e, void *arg);

/* Call visit for the entries whose lease ends at from_ms or later, shard
 * by shard under its lock, newest grant first, up to the first that ends
 * before (with one lease TTL, every older one does too); visit may remove
 * the entry it is given. */
static void sweep(struct px_lease_cache *c, uint64_t from_ms, visit_fn visit, void *arg)
{
	for (int i = 0; i < SHARDS; i++) {
		struct shard *s = &c->s[i];
		struct entry *e, *older;

		pthread_mutex_lock(&s->lock);
		for (e = s->newest; e && e->deadline_ms >= from_ms; e = older) {
			older = e->older;
			visit(c, s, e, arg);
		}
		pthread_mutex_unlock(&s->lock);
	}
}

static void clear_visit(struct px_lease_cache *c, struct shard *s, struct entry *e, void *tenant)
{
	if (!tenant || !strcmp(e->name, tenant))
		entry_remove(c, s, find_entry(c, s, e));
}

void px_lease_cache_clear(struct px_lease_cache *c, const char *tenant)
{
	uint64_t n = drop_number(c);

	for (int i = 0; i < SHARDS; i++) {
		pthread_mutex_lock(&c->s[i].lock);
		max_into(&c->s[i].dropped, n);
		pthread_mutex_unlock(&c->s[i].lock);
	}
	sweep(c, 0, clear_visit, (void *)tenant);
}

/* A key copied out of the cache, with the lease_seq it was cached with and
 * a reader (for renewal its latest reader, for release its grant's). */
struct lkey {
	char *tenant;
	char *key;
	uint64_t seq;
	uint64_t reader;
};

/* A growing list of keys copied out of the cache. */
struct key_list {
	struct lkey *v;
	size_t n, cap;
};

static void key_list_free(struct key_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].tenant);
		free(l->v[i].key);
	}
	free(l->v);
}

/* Append a copy of e's name, with reader; 0, or -1 on ENOMEM (the list is
 * unchanged). */
static int key_list_add(struct key_list *l, const struct entry *e, uint64_t reader)
{
	struct lkey *k;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;

		k = realloc(l->v, cap * sizeof(*k));
		if (!k)
			return -1;
		l->v = k;
		l->cap = cap;
	}
	k = &l->v[l->n];
	k->tenant = strdup(e->name);
	k->key = strdup(e->name + e->tlen + 1);
	k->seq = e->seq;
	k->reader = reader;
	if (!k->tenant || !k->key) {
		free(k->tenant);
		free(k->key);
		return -1;
	}
	l->n++;
	return 0;
}

static int key_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lkey *)a)->tenant, ((const struct lkey *)b)->tenant);
}

/* Call fn(arg, run, k) for each run of up to PX_RENEW_BATCH keys of l of
 * one tenant, then free l. */
static void key_list_batches(struct key_list *l, void (*fn)(void *, struct lkey *, size_t),
			     void *arg)
{
	size_t i = 0;

	if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), key_cmp);
	while (i < l->n) {
		size_t k = 1;

		while (i + k < l->n && k < PX_RENEW_BATCH &&
		       !strcmp(l->v[i + k].tenant, l->v[i].tenant))
			k++;
		fn(arg, l->v + i, k);
		i += k;
	}
	key_list_free(l);
}

struct due {
	uint64_t limit_ms;
	uint64_t slack_ms;
	struct key_list l;
};

/* List e, whose lease runs, if its lease ends before the limit and reads
 * since its last renewal need it more than slack past its end (a renewal
 * runs one TTL from now: for reads the lease covers it would only keep the
 * key leased longer than they asked); without memory it runs out its
 * lease. */
static void due_visit(struct px_lease_cache *c, struct shard *s, struct entry *e, void *arg)
{
	struct due *d = arg;
	uint64_t need = e->reader_until_ms > e->others_ms ? e->reader_until_ms : e->others_ms;

	(void)c;
	(void)s;
	if (e->read && e->deadline_ms <= d->limit_ms && need > e->deadline_ms + d->slack_ms)
		key_list_add(&d->l, e, e->reader);
}

/* Replace a renewed entry with what the master said now, or drop it;
 * nothing when a drop of its shard or a clear came since mark (taken
 * before asking): the entry there may be newer than the answer. */
static void apply_due(struct px_lease_cache *c, const struct lkey *d, const struct px_cached *fresh,
		      uint64_t mark)
{
	uint64_t h = name_hash(d->tenant, d->key);
	struct shard *s = shard_of(c, h);
	unsigned i;

	pthread_mutex_lock(&s->lock);
	if (dropped_since(s, mark)) { /* read stays set: the next renewal asks again */
		pthread_mutex_unlock(&s->lock);
		return;
	}
	i = find(c, s, h, d->tenant, d->key);
	if (s->tab[i].e && fresh && !fresh->landing) {
		s->tab[i].e->read = false;
		entry_update(c, s, i, fresh);
	} else if (s->tab[i].e) {
		entry_remove(c, s, i);
	}
	pthread_mutex_unlock(&s->lock);
}

struct renewal {
	struct px_lease_cache *c;
	px_lease_renew_fn renew;
	void *arg;
	struct px_cached *fresh; /* PX_RENEW_BATCH */
	int found[PX_RENEW_BATCH];
};

/* Renew d[0..k), all of one tenant. */
static void renew_batch(void *arg, struct lkey *d, size_t k)
{
	struct renewal *rn = arg;
	char *keys[PX_RENEW_BATCH];
	uint64_t readers[PX_RENEW_BATCH] = {0}, mark = px_lease_cache_mark(rn->c);

	for (size_t j = 0; j < k; j++) {
		keys[j] = d[j].key;
		readers[j] = d[j].reader;
	}
	/* Master unreachable: leave the entries to run out their leases. */
	if (rn->renew(rn->arg, d[0].tenant, keys, readers, k, rn->fresh, rn->found))
		return;
	for (size_t j = 0; j < k; j++)
		apply_due(rn->c, &d[j], rn->found[j] ? &rn->fresh[j] : NULL, mark);
}

void px_lease_cache_renew(struct px_lease_cache *c, uint64_t now_ms, uint64_t window_ms,
			  uint64_t slack_ms, px_lease_renew_fn renew, void *arg)
{
	struct renewal rn = {c, renew, arg, malloc(PX_RENEW_BATCH * sizeof(*rn.fresh)), {0}};
	struct due d = {now_ms + window_ms, slack_ms, {0}};

	if (rn.fresh)
		sweep(c, now_ms + 1, due_visit, &d);
	key_list_batches(&d.l, renew_batch, &rn);
	free(rn.fresh);
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

struct release {
	px_lease_release_fn release;
	void *arg;
};

static void release_batch(void *arg, struct lkey *d, size_t k)
{
	struct release *rl = arg;
	char *keys[PX_RENEW_BATCH];
	uint64_t seqs[PX_RENEW_BATCH], readers[PX_RENEW_BATCH];

	for (size_t j = 0; j < k; j++) {
		keys[j] = d[j].key;
		seqs[j] = d[j].seq;
		readers[j] = d[j].reader;
	}
	rl->release(rl->arg, d[0].tenant, keys, seqs, readers, k);
}

struct orphan {
	const uint64_t *gone; /* sorted */
	size_t n;
	uint64_t now_ms;
	struct key_list l;
};

/* Forget a gone reader's reads of e, whose lease runs; list and drop e if
 * nobody else needs it and its grant was the gone reader's own. A grant to
 * another reader is kept: ending it would end that reader's run of grants
 * at the master, lookups of it still in flight included. */
static void orphan_visit(struct px_lease_cache *c, struct shard *s, struct entry *e, void *arg)
{
	struct orphan *o = arg;

	if (!e->reader || !bsearch(&e->reader, o->gone, o->n, sizeof(*o->gone), u64_cmp))
		return;
	if (e->seq && e->lessee == e->reader && e->others_ms <= o->now_ms &&
	    !key_list_add(&o->l, e, e->lessee)) {
		e->reader_until_ms = e->others_ms = 0; /* nothing left to keep */
		entry_remove(c, s, find_entry(c, s, e));
	} else {
		e->reader = e->reader_until_ms = 0;
	}
}

void px_lease_cache_orphan(struct px_lease_cache *c, uint64_t *gone, size_t n, uint64_t now_ms,
			   px_lease_release_fn release, void *arg)
{
	struct release rl = {release, arg};
	struct orphan o = {gone, n, now_ms, {0}};

	qsort(gone, n, sizeof(*gone), u64_cmp);
	sweep(c, now_ms + 1, orphan_visit, &o);
	key_list_batches(&o.l, release_batch, &rl);
}
