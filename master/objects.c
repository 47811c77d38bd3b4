/*
 * objects.c - object metadata: MST_SHARDS shards, each a mutex and a chained
 * hash table keyed by tenant "\0" key. One call touches one shard, so calls
 * on different keys rarely contend; scans (remove_all, segment loss, client
 * death) take the shards one at a time.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "key.h"
#include "lunar.h"
#include "mst_int.h"

#define MAX_REPLICAS 64 /* replica_num above this is clamped (best effort anyway) */
#define TENANT_MAX   63

enum { ST_PROCESSING, ST_COMPLETE };

struct mst_object {
	struct mst_object *next; /* hash chain */
	uint64_t hash;
	uint64_t size;
	uint64_t writer;       /* client_id of the PutStart */
	uint64_t lease_ms;     /* read lease deadline, monotonic ms */
	uint64_t put_start_ms; /* when PutStart ran */
	uint64_t soft_pin_ms;  /* soft pin deadline, 0 if none */
	int state;
	int hard_pin;
	size_t klen; /* tenant "\0" key, at (char *)&reps[nrep_max] */
	unsigned nrep;
	struct mst_replica reps[];
};

struct mst_shard {
	pthread_mutex_t lock;
	struct mst_object **buckets;
	size_t nbuckets, n;
};

/* A lookup key: tenant "\0" key and its hash. */
struct okey {
	char buf[TENANT_MAX + 1 + LUNAR_KEY_MAX];
	size_t len;
	uint64_t hash;
};

static const char *obj_key(const struct mst_object *o)
{
	return (const char *)&o->reps[o->nrep];
}

static uint64_t fnv1a(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

static const char *tenant_name(const char *tenant)
{
	return tenant && tenant[0] ? tenant : "default";
}

static int okey_make(struct okey *k, const char *tenant, const char *key)
{
	size_t tl, kl;
	int rc;

	tenant = tenant_name(tenant);
	tl = strnlen(tenant, TENANT_MAX + 1);
	rc = lc_tenant_check(tenant, tl);
	if (rc)
		return rc;
	kl = key ? strnlen(key, LUNAR_KEY_MAX + 1) : 0;
	rc = lc_key_check(key, kl);
	if (rc)
		return rc;
	memcpy(k->buf, tenant, tl + 1);
	memcpy(k->buf + tl + 1, key, kl);
	k->len = tl + 1 + kl;
	k->hash = fnv1a(k->buf, k->len);
	return 0;
}

int mst_objects_init(struct mst_master *m)
{
	size_t i;

	m->shards = calloc(MST_SHARDS, sizeof(*m->shards));
	if (!m->shards)
		return -ENOMEM;
	for (i = 0; i < MST_SHARDS; i++) {
		struct mst_shard *s = &m->shards[i];

		s->nbuckets = 16;
		s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
		if (!s->buckets || pthread_mutex_init(&s->lock, NULL)) {
			free(s->buckets);
			goto err;
		}
	}
	return 0;
err:
	while (i--) {
		pthread_mutex_destroy(&m->shards[i].lock);
		free(m->shards[i].buckets);
	}
	free(m->shards);
	m->shards = NULL;
	return -ENOMEM;
}

void mst_objects_fini(struct mst_master *m)
{
	if (!m->shards)
		return;
	for (size_t i = 0; i < MST_SHARDS; i++) {
		struct mst_shard *s = &m->shards[i];

		for (size_t b = 0; b < s->nbuckets; b++) {
			struct mst_object *o, *n;

			for (o = s->buckets[b]; o; o = n) {
				n = o->next;
				free(o);
			}
		}
		free(s->buckets);
		pthread_mutex_destroy(&s->lock);
	}
	free(m->shards);
}

static struct mst_shard *shard_of(struct mst_master *m, const struct okey *k)
{
	return &m->shards[k->hash % MST_SHARDS];
}

static struct mst_object **shard_find(struct mst_shard *s, const struct okey *k)
{
	struct mst_object **pp = &s->buckets[(k->hash / MST_SHARDS) & (s->nbuckets - 1)];

	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->hash == k->hash && (*pp)->klen == k->len &&
		    !memcmp(obj_key(*pp), k->buf, k->len))
			break;
	return pp;
}

/* Double the buckets when the shard is full; failure only costs speed. */
static void shard_grow(struct mst_shard *s)
{
	size_t nb = s->nbuckets * 2;
	struct mst_object **v = calloc(nb, sizeof(*v));

	if (!v)
		return;
	for (size_t b = 0; b < s->nbuckets; b++) {
		struct mst_object *o, *n;

		for (o = s->buckets[b]; o; o = n) {
			struct mst_object **head = &v[(o->hash / MST_SHARDS) & (nb - 1)];

			n = o->next;
			o->next = *head;
			*head = o;
		}
	}
	free(s->buckets);
	s->buckets = v;
	s->nbuckets = nb;
}

static void counter_add(struct mst_master *m, int state, int64_t d)
{
	uint64_t *c = state == ST_COMPLETE ? &m->n_complete : &m->n_processing;

	__atomic_fetch_add(c, (uint64_t)d, __ATOMIC_RELAXED);
}

/* Unlink *pp, give its ranges back and free it. */
static void obj_erase(struct mst_master *m, struct mst_shard *s, struct mst_object **pp)
{
	struct mst_object *o = *pp;

	*pp = o->next;
	s->n--;
	counter_add(m, o->state, -1);
	for (unsigned i = 0; i < o->nrep; i++)
		mst_replica_free(m, &o->reps[i]);
	free(o);
}

static Lunar__Replica *replica_pb(const struct mst_replica *r, Lunar__ReplicaState st)
{
	Lunar__Replica *p = malloc(sizeof(*p));

	if (!p)
		return NULL;
	lunar__replica__init(p);
	p->type = LUNAR__REPLICA_TYPE__MEMORY;
	p->state = st;
	p->offset = r->off;
	p->length = r->len;
	p->segment = strdup(r->seg->name);
	p->endpoint = strdup(r->seg->endpoint);
	if (!p->segment || !p->endpoint) {
		protobuf_c_message_free_unpacked(&p->base, NULL);
		return NULL;
	}
	return p;
}

/* Heap copies of o's replicas for a reply; 0 or -ENOMEM. */
static int replicas_pb(const struct mst_object *o, Lunar__Replica ***out, size_t *n)
{
	Lunar__ReplicaState st = o->state == ST_COMPLETE ? LUNAR__REPLICA_STATE__COMPLETE
							 : LUNAR__REPLICA_STATE__PROCESSING;
	Lunar__Replica **v = calloc(o->nrep, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (unsigned i = 0; i < o->nrep; i++) {
		v[i] = replica_pb(&o->reps[i], st);
		if (!v[i]) {
			while (i--)
				protobuf_c_message_free_unpacked(&v[i]->base, NULL);
			free(v);
			return -ENOMEM;
		}
	}
	*out = v;
	*n = o->nrep;
	return 0;
}

/* A PROCESSING object placed for rq; 0, or a code. Shard lock held. */
static int obj_create(struct mst_master *m, uint64_t client, const struct okey *k,
		      const Lunar__PutStartRequest *rq, struct mst_object **out)
{
	unsigned want = rq->replica_num ? rq->replica_num : 1;
	struct mst_object *o;
	int rc;

	if (want > MAX_REPLICAS)
		want = MAX_REPLICAS;
	o = calloc(1, sizeof(*o) + want * sizeof(o->reps[0]) + k->len);
	if (!o)
		return -ENOMEM;
	rc = mst_place(m, client, rq->size, want, rq->preferred_segments, rq->n_preferred_segments,
		       o->reps);
	if (rc < 0) {
		free(o);
		return rc;
	}
	o->nrep = (unsigned)rc;
	/* the key moves down to sit right after the replicas actually placed */
	memcpy((char *)&o->reps[o->nrep], k->buf, k->len);
	o->klen = k->len;
	o->hash = k->hash;
	o->size = rq->size;
	o->writer = client;
	o->put_start_ms = lc_now_ms();
	o->hard_pin = rq->hard_pin;
	if (rq->soft_pin) {
		uint64_t ttl =
		    rq->soft_pin_ttl_ms ? rq->soft_pin_ttl_ms : m->cfg.kv_soft_pin_ttl_ms;

		if (ttl > m->cfg.max_kv_soft_pin_ttl_ms)
			ttl = m->cfg.max_kv_soft_pin_ttl_ms;
		o->soft_pin_ms = o->put_start_ms + ttl;
	}
	o->state = ST_PROCESSING;
	*out = o;
	return 0;
}

int mst_obj_put_start(struct mst_master *m, uint64_t client, const char *tenant,
		      const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n)
{
	struct okey k;
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = okey_make(&k, tenant, rq->key);

	if (rc)
		return rc;
	if (!rq->size)
		return LUNAR_ERR_INVALID_PARAMS;
	s = shard_of(m, &k);
	pthread_mutex_lock(&s->lock);
	pp = shard_find(s, &k);
	if (*pp) {
		o = *pp;
		if (o->state == ST_COMPLETE ||
		    lc_now_ms() - o->put_start_ms < m->cfg.put_start_discard_timeout_ms) {
			rc = LUNAR_ERR_OBJECT_ALREADY_EXISTS;
			goto out_unlock;
		}
		obj_erase(m, s, pp); /* a put abandoned long ago: pre-empt it */
	}
	rc = obj_create(m, client, &k, rq, &o);
	if (rc)
		goto out_unlock;
	rc = replicas_pb(o, reps, n);
	if (rc) {
		for (unsigned i = 0; i < o->nrep; i++)
			mst_replica_free(m, &o->reps[i]);
		free(o);
		goto out_unlock;
	}
	pp = shard_find(s, &k);
	o->next = NULL;
	*pp = o;
	s->n++;
	counter_add(m, ST_PROCESSING, 1);
	if (s->n > s->nbuckets)
		shard_grow(s);
out_unlock:
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Lock the shard of (tenant, key) and find it; on a bad key nothing is locked
 * and the code is returned. */
static int obj_lookup(struct mst_master *m, const char *tenant, const char *key,
		      struct mst_shard **s, struct mst_object ***pp)
{
	struct okey k;
	int rc = okey_make(&k, tenant, key);

	if (rc)
		return rc;
	*s = shard_of(m, &k);
	pthread_mutex_lock(&(*s)->lock);
	*pp = shard_find(*s, &k);
	return 0;
}

/* PutEnd (commit) or PutRevoke (erase), only by the writer. */
static int obj_finish(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
		      int commit)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (!o)
		rc = LUNAR_ERR_OBJECT_NOT_FOUND;
	else if (o->writer != client)
		rc = LUNAR_ERR_ILLEGAL_CLIENT;
	else if (o->state == ST_COMPLETE)
		rc = commit ? 0 : LUNAR_ERR_INVALID_PARAMS; /* a second PutEnd is a no-op */
	else if (!commit)
		obj_erase(m, s, pp);
	else {
		o->state = ST_COMPLETE;
		counter_add(m, ST_PROCESSING, -1);
		counter_add(m, ST_COMPLETE, 1);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_put_end(struct mst_master *m, uint64_t client, const char *tenant, const char *key)
{
	return obj_finish(m, client, tenant, key, 1);
}

int mst_obj_put_revoke(struct mst_master *m, uint64_t client, const char *tenant, const char *key)
{
	return obj_finish(m, client, tenant, key, 0);
}

static void lease_grant(struct mst_master *m, struct mst_object *o)
{
	uint64_t until = lc_now_ms() + m->cfg.kv_lease_ttl_ms;

	if (until > o->lease_ms)
		o->lease_ms = until;
}

int mst_obj_get(struct mst_master *m, const char *tenant, const char *key, uint64_t *size,
		Lunar__Replica ***reps, size_t *n)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (!o)
		rc = LUNAR_ERR_OBJECT_NOT_FOUND;
	else if (o->state != ST_COMPLETE)
		rc = LUNAR_ERR_REPLICA_IS_NOT_READY;
	else
		rc = replicas_pb(o, reps, n);
	if (!rc) {
		*size = o->size;
		lease_grant(m, o);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_exist(struct mst_master *m, const char *tenant, const char *key)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (o && o->state == ST_COMPLETE) {
		lease_grant(m, o);
		rc = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_remove(struct mst_master *m, const char *tenant, const char *key, int force)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (!o)
		rc = LUNAR_ERR_OBJECT_NOT_FOUND;
	else if (o->state != ST_COMPLETE)
		rc = LUNAR_ERR_REPLICA_IS_NOT_READY;
	else if (!force && o->lease_ms > lc_now_ms())
		rc = LUNAR_ERR_OBJECT_HAS_LEASE;
	else
		obj_erase(m, s, pp);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Apply fn to every object of shard s under its lock; fn returns 1 to erase
 * the object and free the space of the replicas it still has. */
typedef int (*obj_visit_fn)(struct mst_object *o, void *arg);

static int64_t shard_sweep(struct mst_master *m, struct mst_shard *s, obj_visit_fn fn, void *arg)
{
	int64_t erased = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t b = 0; b < s->nbuckets; b++) {
		struct mst_object **pp = &s->buckets[b];

		while (*pp) {
			if (fn(*pp, arg)) {
				obj_erase(m, s, pp);
				erased++;
			} else {
				pp = &(*pp)->next;
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
	return erased;
}

struct remove_all_arg {
	const char *tenant; /* with its "\0" */
	size_t tlen;
	int force;
	uint64_t now;
};

static int visit_remove_all(struct mst_object *o, void *arg)
{
	const struct remove_all_arg *a = arg;

	return o->klen > a->tlen && !memcmp(obj_key(o), a->tenant, a->tlen) &&
	       o->state == ST_COMPLETE && (a->force || o->lease_ms <= a->now);
}

int64_t mst_obj_remove_all(struct mst_master *m, const char *tenant, int force)
{
	struct remove_all_arg a = {.force = force, .now = lc_now_ms()};
	int64_t n = 0;
	int rc;

	a.tenant = tenant_name(tenant);
	a.tlen = strnlen(a.tenant, TENANT_MAX + 1);
	rc = lc_tenant_check(a.tenant, a.tlen);
	if (rc)
		return rc;
	a.tlen++;
	for (size_t i = 0; i < MST_SHARDS; i++)
		n += shard_sweep(m, &m->shards[i], visit_remove_all, &a);
	return n;
}

struct drop_arg {
	const struct mst_segment *seg;
	uint64_t client, before_ms;
};

static int visit_drop(struct mst_object *o, void *arg)
{
	const struct drop_arg *a = arg;
	unsigned kept = 0;

	if (a->client && o->state == ST_PROCESSING && o->writer == a->client &&
	    o->put_start_ms <= a->before_ms)
		return 1;
	if (!a->seg)
		return 0;
	for (unsigned i = 0; i < o->nrep; i++)
		if (o->reps[i].seg != a->seg)
			o->reps[kept++] = o->reps[i];
	if (kept == o->nrep)
		return 0;
	/* keep the key right after the replicas, where obj_key looks */
	memmove(&o->reps[kept], &o->reps[o->nrep], o->klen);
	o->nrep = kept;
	return kept == 0;
}

void mst_objects_drop(struct mst_master *m, const struct mst_segment *seg, uint64_t client,
		      uint64_t before_ms)
{
	struct drop_arg a = {.seg = seg, .client = client, .before_ms = before_ms};

	for (size_t i = 0; i < MST_SHARDS; i++)
		shard_sweep(m, &m->shards[i], visit_drop, &a);
}
