/*
 * lease_cache.c - a sharded hash of leased replica lists; see lease_cache.h.
 * Each shard is a mutex, chained buckets, and its entries in the order
 * their leases were granted: a full shard drops the entry leased longest
 * ago, which under one lease TTL is the one whose lease ends first (or has
 * ended). Every operation but clear and renew is O(1).
 */
#include "proxy/lease_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SHARDS 64

/* Only the replicas an entry has are stored (most objects have one; a
 * full px_cached is over 700 bytes), then its name "tenant\0key\0". */
struct entry {
	struct entry *next;	     /* bucket chain */
	struct entry *older, *newer; /* the shard's lease order */
	uint64_t hash;
	char *name;
	size_t tlen;
	bool read;
	unsigned cap; /* room in rep[] */
	uint64_t size;
	uint64_t deadline_ms;
	uint32_t crc;
	unsigned nrep;
	struct px_cached_replica rep[];
};

struct shard {
	pthread_mutex_t lock;
	unsigned count;
	struct entry *oldest, *newest;
	struct entry **b;
};

struct px_lease_cache {
	unsigned per_shard;
	unsigned nbuckets; /* per shard, a power of two */
	struct shard s[SHARDS];
};

/* FNV-1a over tenant, a NUL, then key. */
static uint64_t name_hash(const char *tenant, const char *key)
{
	uint64_t h = 1469598103934665603ull;

	for (const char *p = tenant;; p++) {
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
		if (!*p)
			break;
	}
	for (const char *p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

static bool same(const struct entry *e, uint64_t h, const char *tenant, const char *key)
{
	return e->hash == h && !strcmp(e->name, tenant) && !strcmp(e->name + e->tlen + 1, key);
}

static struct shard *shard_of(struct px_lease_cache *c, uint64_t h)
{
	return &c->s[h % SHARDS];
}

static struct entry **chain_of(const struct px_lease_cache *c, struct shard *s, uint64_t h)
{
	return &s->b[(h / SHARDS) & (c->nbuckets - 1)];
}

static struct entry **slot_of(const struct px_lease_cache *c, struct shard *s, uint64_t h,
			      const char *tenant, const char *key)
{
	struct entry **pp = chain_of(c, s, h);

	while (*pp && !same(*pp, h, tenant, key))
		pp = &(*pp)->next;
	return pp;
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

/* Take the entry *pp names out of its chain and the order, and free it. */
static void entry_remove(struct shard *s, struct entry **pp)
{
	struct entry *e = *pp;

	*pp = e->next;
	order_unlink(s, e);
	free(e);
	s->count--;
}

/* A new entry for (tenant, key) holding v; NULL on ENOMEM. */
static struct entry *entry_new(uint64_t h, const char *tenant, const char *key,
			       const struct px_cached *v)
{
	size_t tl = strlen(tenant), kl = strlen(key);
	struct entry *e = malloc(sizeof(*e) + v->nrep * sizeof(e->rep[0]) + tl + kl + 2);

	if (!e)
		return NULL;
	e->name = (char *)&e->rep[v->nrep];
	memcpy(e->name, tenant, tl + 1);
	memcpy(e->name + tl + 1, key, kl + 1);
	e->tlen = tl;
	e->hash = h;
	e->read = false;
	e->cap = v->nrep;
	return e;
}

/* Store v in e, which has room for v->nrep replicas. */
static void entry_set(struct entry *e, const struct px_cached *v)
{
	e->size = v->size;
	e->deadline_ms = v->deadline_ms;
	e->crc = v->crc;
	e->nrep = v->nrep;
	memcpy(e->rep, v->rep, v->nrep * sizeof(e->rep[0]));
}

static void entry_get(const struct entry *e, struct px_cached *out)
{
	out->size = e->size;
	out->deadline_ms = e->deadline_ms;
	out->crc = e->crc;
	out->nrep = e->nrep;
	memcpy(out->rep, e->rep, e->nrep * sizeof(e->rep[0]));
}

/* Put v in the entry *pp names, moving it to the newest end of the order;
 * an entry without room is replaced (dropped if no memory is left). */
static void entry_update(struct shard *s, struct entry **pp, const struct px_cached *v)
{
	struct entry *e = *pp, *n;

	if (e->cap < v->nrep) {
		n = entry_new(e->hash, e->name, e->name + e->tlen + 1, v);
		if (!n) {
			entry_remove(s, pp);
			return;
		}
		n->read = e->read;
		n->next = e->next;
		*pp = n;
		order_unlink(s, e);
		free(e);
		e = n;
	} else {
		order_unlink(s, e);
	}
	entry_set(e, v);
	order_append(s, e);
}

struct px_lease_cache *px_lease_cache_create(unsigned capacity)
{
	struct px_lease_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->per_shard = capacity / SHARDS ? capacity / SHARDS : 1;
	c->nbuckets = 1;
	while (c->nbuckets < c->per_shard)
		c->nbuckets *= 2;
	for (int i = 0; i < SHARDS; i++) {
		c->s[i].b = calloc(c->nbuckets, sizeof(*c->s[i].b));
		if (!c->s[i].b) {
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
	for (int i = 0; i < SHARDS && c->s[i].b; i++) {
		struct entry *e = c->s[i].oldest, *next;

		for (; e; e = next) {
			next = e->newer;
			free(e);
		}
		free(c->s[i].b);
		pthread_mutex_destroy(&c->s[i].lock);
	}
	free(c);
}

int px_lease_cache_get(struct px_lease_cache *c, const char *tenant, const char *key,
		       uint64_t now_ms, uint64_t margin_ms, struct px_cached *out)
{
	uint64_t h = name_hash(tenant, key);
	struct shard *s = shard_of(c, h);
	struct entry *e;
	int hit = 0;

	pthread_mutex_lock(&s->lock);
	e = *slot_of(c, s, h, tenant, key);
	if (e && e->deadline_ms > now_ms + margin_ms) {
		e->read = true;
		entry_get(e, out);
		hit = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return hit;
}

int px_lease_cache_fill(const Lunar__GetReplicaListResult *res, uint64_t deadline_ms,
			struct px_cached *out)
{
	if (res->n_replicas > PX_CACHE_MAX_REPLICAS)
		return -1;
	out->size = res->size;
	out->crc = res->crc32c;
	out->deadline_ms = deadline_ms;
	out->nrep = (unsigned)res->n_replicas;
	for (size_t i = 0; i < res->n_replicas; i++) {
		const Lunar__Replica *rp = res->replicas[i];

		if (strlen(rp->endpoint) >= PX_ENDPOINT_MAX)
			return -1;
		out->rep[i].type = rp->type;
		strcpy(out->rep[i].endpoint, rp->endpoint);
		out->rep[i].offset = rp->offset;
		out->rep[i].length = rp->length;
	}
	return 0;
}

void px_lease_cache_put(struct px_lease_cache *c, const char *tenant, const char *key,
			const struct px_cached *v)
{
	uint64_t h = name_hash(tenant, key);
	struct shard *s = shard_of(c, h);
	struct entry **pp, *e;

	pthread_mutex_lock(&s->lock);
	pp = slot_of(c, s, h, tenant, key);
	if (*pp) {
		entry_update(s, pp, v);
		goto out;
	}
	e = entry_new(h, tenant, key, v);
	if (!e)
		goto out;
	if (s->count >= c->per_shard)
		entry_remove(s, slot_of(c, s, s->oldest->hash, s->oldest->name,
					s->oldest->name + s->oldest->tlen + 1));
	entry_set(e, v);
	pp = chain_of(c, s, h);
	e->next = *pp;
	*pp = e;
	order_append(s, e);
	s->count++;
out:
	pthread_mutex_unlock(&s->lock);
}

void px_lease_cache_drop(struct px_lease_cache *c, const char *tenant, const char *key)
{
	uint64_t h = name_hash(tenant, key);
	struct shard *s = shard_of(c, h);
	struct entry **pp;

	pthread_mutex_lock(&s->lock);
	pp = slot_of(c, s, h, tenant, key);
	if (*pp)
		entry_remove(s, pp);
	pthread_mutex_unlock(&s->lock);
}

void px_lease_cache_clear(struct px_lease_cache *c, const char *tenant)
{
	for (int i = 0; i < SHARDS; i++) {
		struct shard *s = &c->s[i];

		pthread_mutex_lock(&s->lock);
		for (unsigned j = 0; j < c->nbuckets; j++) {
			struct entry **pp = &s->b[j];

			while (*pp) {
				if (strcmp((*pp)->name, tenant))
					pp = &(*pp)->next;
				else
					entry_remove(s, pp);
			}
		}
		pthread_mutex_unlock(&s->lock);
	}
}

/* A due entry, copied out of the cache for renewal. */
struct due {
	char *tenant;
	char *key;
};

static int due_cmp(const void *a, const void *b)
{
	return strcmp(((const struct due *)a)->tenant, ((const struct due *)b)->tenant);
}

/* Copy out the entries read since their last renewal and ending soon. */
static size_t collect_due(struct px_lease_cache *c, uint64_t limit_ms, struct due **out)
{
	size_t n = 0, cap = 0;
	struct due *d = NULL;

	for (int i = 0; i < SHARDS; i++) {
		pthread_mutex_lock(&c->s[i].lock);
		for (struct entry *e = c->s[i].oldest; e; e = e->newer) {
			struct due *nd;

			if (!e->read || e->deadline_ms > limit_ms)
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 64;
				nd = realloc(d, cap * sizeof(*d));
				if (!nd)
					goto out;
				d = nd;
			}
			d[n].tenant = strdup(e->name);
			d[n].key = strdup(e->name + e->tlen + 1);
			if (!d[n].tenant || !d[n].key) {
				free(d[n].tenant);
				free(d[n].key);
				goto out;
			}
			n++;
		}
out:
		pthread_mutex_unlock(&c->s[i].lock);
	}
	*out = d;
	return n;
}

/* Replace a renewed entry with what the master said now, or drop it. */
static void apply_due(struct px_lease_cache *c, const struct due *d, const struct px_cached *fresh)
{
	uint64_t h = name_hash(d->tenant, d->key);
	struct shard *s = shard_of(c, h);
	struct entry **pp, *e;

	pthread_mutex_lock(&s->lock);
	pp = slot_of(c, s, h, d->tenant, d->key);
	e = *pp;
	if (e && fresh) {
		e->read = false;
		entry_update(s, pp, fresh);
	} else if (e) {
		entry_remove(s, pp);
	}
	pthread_mutex_unlock(&s->lock);
}

/* Renew d[0..k), all of one tenant. */
static void renew_batch(struct px_lease_cache *c, struct due *d, size_t k, px_lease_renew_fn renew,
			void *arg, struct px_cached *fresh, int *found)
{
	char *keys[PX_RENEW_BATCH];

	for (size_t j = 0; j < k; j++)
		keys[j] = d[j].key;
	/* Master unreachable: leave the entries to run out their leases. */
	if (renew(arg, d[0].tenant, keys, k, fresh, found))
		return;
	for (size_t j = 0; j < k; j++)
		apply_due(c, &d[j], found[j] ? &fresh[j] : NULL);
}

void px_lease_cache_renew(struct px_lease_cache *c, uint64_t now_ms, uint64_t window_ms,
			  px_lease_renew_fn renew, void *arg)
{
	struct px_cached *fresh = malloc(PX_RENEW_BATCH * sizeof(*fresh));
	int found[PX_RENEW_BATCH];
	struct due *d = NULL;
	size_t n = 0, i = 0;

	if (fresh)
		n = collect_due(c, now_ms + window_ms, &d);
	if (n)
		qsort(d, n, sizeof(*d), due_cmp);
	while (i < n) {
		size_t k = 1;

		while (i + k < n && k < PX_RENEW_BATCH && !strcmp(d[i + k].tenant, d[i].tenant))
			k++;
		renew_batch(c, d + i, k, renew, arg, fresh, found);
		i += k;
	}
	for (i = 0; i < n; i++) {
		free(d[i].tenant);
		free(d[i].key);
	}
	free(d);
	free(fresh);
}
