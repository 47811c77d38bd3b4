/*
 * objects.c - object metadata: MST_SHARDS shards, each a mutex and an
 * open-addressing table keyed by tenant "\0" key (mst_obj.h), and the
 * per-key calls: the two-phase put, get, exists, remove, stat. One call
 * touches one shard, so calls on different keys rarely contend; scans are
 * in scan.c, upsert in upsert.c.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "failpoint.h"
#include "key.h"
#include "log.h"
#include "lunar.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "mst_obj.h"

const char *mst_tenant_name(const char *tenant)
{
	return tenant && tenant[0] ? tenant : "default";
}

/* The tenant a request means and the lengths of it and key, both checked:
 * 0 or INVALID_PARAMS/INVALID_KEY. */
static int okey_check(const char **tenant, const char *key, size_t *tl, size_t *kl)
{
	int rc;

	*tenant = mst_tenant_name(*tenant);
	*tl = strnlen(*tenant, MST_TENANT_MAX + 1);
	rc = lc_tenant_check(*tenant, *tl);
	if (rc)
		return rc;
	*kl = key ? strnlen(key, LUNAR_KEY_MAX + 1) : 0;
	return lc_key_check(key, *kl);
}

int mst_okey_make(struct mst_okey *k, const char *tenant, const char *key)
{
	size_t tl, kl;
	int rc = okey_check(&tenant, key, &tl, &kl);

	if (rc)
		return rc;
	memcpy(k->buf, tenant, tl + 1);
	memcpy(k->buf + tl + 1, key, kl);
	k->tlen = tl + 1;
	k->len = tl + 1 + kl;
	k->hash = lc_name_hash(tenant, tl, key, kl);
	return 0;
}

int mst_okey_hash(const char *tenant, const char *key, uint64_t *hash)
{
	size_t tl, kl;
	int rc = okey_check(&tenant, key, &tl, &kl);

	if (!rc)
		*hash = lc_name_hash(tenant, tl, key, kl);
	return rc;
}

#define SHARD_MIN_SLOTS 16

int mst_objects_init(struct mst_master *m)
{
	size_t i;

	m->shards = calloc(MST_SHARDS, sizeof(*m->shards));
	if (!m->shards)
		return -ENOMEM;
	for (i = 0; i < MST_SHARDS; i++) {
		struct mst_shard *s = &m->shards[i];

		s->cap = SHARD_MIN_SLOTS;
		s->slots = calloc(s->cap, sizeof(*s->slots));
		if (!s->slots || pthread_mutex_init(&s->lock, NULL)) {
			free(s->slots);
			goto err;
		}
	}
	return 0;
err:
	while (i--) {
		pthread_mutex_destroy(&m->shards[i].lock);
		free(m->shards[i].slots);
	}
	free(m->shards);
	m->shards = NULL;
	return -ENOMEM;
}

static void obj_free(struct mst_object *o)
{
	if (o->up)
		free(o->up->reps);
	free(o->up);
	free(o->reps);
	mst_disk_reps_free(o);
	free(o);
}

void mst_objects_fini(struct mst_master *m)
{
	if (!m->shards)
		return;
	for (size_t i = 0; i < MST_SHARDS; i++) {
		struct mst_shard *s = &m->shards[i];

		for (size_t j = 0; j < s->cap; j++)
			if (s->slots[j].o)
				obj_free(s->slots[j].o);
		free(s->slots);
		pthread_mutex_destroy(&s->lock);
	}
	free(m->shards);
}

/* The slot pointer a caller holds: &slot->o. */
static struct mst_slot *slot_of(struct mst_object **pp)
{
	return (struct mst_slot *)(void *)pp;
}

struct mst_object **mst_obj_find_key(struct mst_shard *s, const struct mst_okey *k)
{
	size_t mask = s->cap - 1, i = mst_obj_home(k->hash, s->cap);
	struct mst_slot *v = s->slots;

	for (; v[i].o; i = (i + 1) & mask)
		if (v[i].hash == k->hash && v[i].o->klen == k->len &&
		    !memcmp(v[i].o->kbuf, k->buf, k->len))
			break;
	return &v[i].o;
}

struct mst_object **mst_obj_find_id(struct mst_shard *s, uint64_t hash, const void *o, uint64_t id)
{
	size_t mask = s->cap - 1, i = mst_obj_home(hash, s->cap);
	struct mst_slot *v = s->slots;

	for (; v[i].o; i = (i + 1) & mask)
		if (v[i].o == o && v[i].o->id == id)
			return &v[i].o;
	return NULL;
}

/* Put o in the first empty slot of its probe; the table has one. */
static void slot_put(struct mst_slot *v, size_t cap, struct mst_object *o)
{
	size_t i = mst_obj_home(o->hash, cap);

	while (v[i].o)
		i = (i + 1) & (cap - 1);
	v[i].o = o;
	v[i].hash = o->hash;
}

/* Double the slots; 0 or -ENOMEM. */
static int shard_grow(struct mst_shard *s)
{
	size_t cap = s->cap * 2;
	struct mst_slot *v = calloc(cap, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t j = 0; j < s->cap; j++)
		if (s->slots[j].o)
			slot_put(v, cap, s->slots[j].o);
	free(s->slots);
	/* read without the lock by a batch asking memory ahead (ahead.c) */
	LC_WRITE_ONCE(s->slots, v);
	LC_WRITE_ONCE(s->cap, cap);
	return 0;
}

int mst_obj_room(struct mst_shard *s)
{
	/* Past half full the table doubles; when it cannot, it fills on, but
	 * always keeps an empty slot to end every probe. */
	if (s->n + 1 > s->cap / 2 && shard_grow(s) && s->n + 2 > s->cap)
		return -ENOMEM;
	return 0;
}

static void shard_insert(struct mst_shard *s, struct mst_object *o)
{
	slot_put(s->slots, s->cap, o);
	s->n++;
}

/* Empty the slot at i, then move back each later object of the run whose
 * probe starts at or before the hole, so every probe still reaches its
 * object before an empty slot. */
static void shard_remove(struct mst_shard *s, size_t i)
{
	size_t mask = s->cap - 1, j = i;

	for (;;) {
		j = (j + 1) & mask;
		if (!s->slots[j].o)
			break;
		/* movable unless its home lies cyclically in (i, j] */
		if (((j - mst_obj_home(s->slots[j].hash, s->cap)) & mask) >= ((j - i) & mask)) {
			s->slots[i] = s->slots[j];
			i = j;
		}
	}
	s->slots[i].o = NULL;
	s->n--;
}

static void counter_add(struct mst_master *m, int state, int64_t d)
{
	uint64_t *c = state == MST_ST_COMPLETE ? &m->n_complete : &m->n_processing;

	lc_fetch_add_relaxed(c, (uint64_t)d);
}

void mst_obj_insert(struct mst_master *m, struct mst_shard *s, struct mst_object *o)
{
	shard_insert(s, o);
	counter_add(m, o->state, 1);
}

void mst_replicas_free(struct mst_master *m, const struct mst_replica *r, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		mst_replica_free(m, &r[i]);
}

void mst_obj_reps_free(struct mst_master *m, struct mst_object *o, uint64_t not_before_ms)
{
	if (o->beside_resv &&
	    mst_resv_hold(m, o->writer, o->beside_resv, o->reps, o->nrep, not_before_ms)) {
		free(o->reps); /* held: copied */
	} else if (not_before_ms > lc_now_ms()) {
		mst_deferred_add(m, o->reps, o->nrep, not_before_ms);
	} else {
		mst_replicas_free(m, o->reps, o->nrep);
		free(o->reps);
	}
	o->reps = NULL;
	o->nrep = 0;
	o->beside_resv = 0;
}

void mst_obj_erase(struct mst_master *m, struct mst_shard *s, struct mst_object **pp)
{
	struct mst_object *o = *pp;

	shard_remove(s, (size_t)(slot_of(pp) - s->slots));
	counter_add(m, o->state, -1);
	mst_tenant_uncharge(m, o->tenant, o->size);
	mst_obj_reps_free(m, o, 0);
	if (o->up) {
		/* its writer may still be writing there: give the space back late */
		mst_tenant_uncharge(m, o->tenant, o->up->size);
		mst_deferred_add(m, o->up->reps, o->up->nrep,
				 o->up->start_ms + m->cfg.put_start_release_timeout_ms);
		o->up->reps = NULL;
	}
	mst_offload_forget(m, o);
	obj_free(o);
}

void mst_obj_release_late(struct mst_master *m, struct mst_object *o)
{
	mst_deferred_add(m, o->reps, o->nrep,
			 o->put_start_ms + m->cfg.put_start_release_timeout_ms);
	o->reps = NULL;
	o->nrep = 0;
}

void mst_obj_discard(struct mst_master *m, struct mst_shard *s, struct mst_object **pp)
{
	mst_obj_release_late(m, *pp);
	lc_fetch_add_relaxed(&m->ctr.discarded_puts, 1);
	mst_obj_erase(m, s, pp);
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
	p->mount = r->seg->mount;
	p->segment = strdup(r->seg->name);
	p->endpoint = strdup(r->seg->endpoint);
	if (!p->segment || !p->endpoint) {
		protobuf_c_message_free_unpacked(&p->base, NULL);
		return NULL;
	}
	return p;
}

int mst_replicas_pb(const struct mst_replica *r, unsigned n, Lunar__ReplicaState st,
		    Lunar__Replica ***out, size_t *nout)
{
	Lunar__Replica **v = calloc(n ? n : 1, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		v[i] = replica_pb(&r[i], st);
		if (!v[i]) {
			while (i--)
				protobuf_c_message_free_unpacked(&v[i]->base, NULL);
			free(v);
			return -ENOMEM;
		}
	}
	*out = v;
	*nout = n;
	return 0;
}

uint64_t mst_soft_pin_ttl(const struct mst_master *m, int soft_pin, uint64_t ttl_ms)
{
	uint64_t ttl = ttl_ms ? ttl_ms : m->cfg.kv_soft_pin_ttl_ms;

	if (!soft_pin)
		return 0;
	return ttl > m->cfg.max_kv_soft_pin_ttl_ms ? m->cfg.max_kv_soft_pin_ttl_ms : ttl;
}

/* A PROCESSING object for rq, placed but not inserted; 0 or a code. */
static int obj_create(struct mst_master *m, uint64_t client, const struct mst_okey *k,
		      const Lunar__PutStartRequest *rq, struct mst_object **out)
{
	unsigned want = rq->replica_num ? rq->replica_num : 1;
	struct mst_object *o;
	int rc;

	if (want > MST_MAX_REPLICAS)
		want = MST_MAX_REPLICAS;
	o = calloc(1, sizeof(*o) + k->len + 1);
	if (!o)
		return -ENOMEM;
	o->reps = calloc(want, sizeof(*o->reps));
	rc = o->reps ? mst_place(m, client, rq->size, want, rq->preferred_segments,
				 rq->n_preferred_segments, o->reps)
		     : -ENOMEM;
	if (rc < 0) {
		obj_free(o);
		return rc;
	}
	o->nrep = (unsigned)rc;
	mst_obj_name(m, o, k);
	o->size = rq->size;
	o->writer = client;
	o->put_start_ms = lc_now_ms();
	o->hard_pin = rq->hard_pin;
	o->soft_pin_ttl_ms = mst_soft_pin_ttl(m, rq->soft_pin, rq->soft_pin_ttl_ms);
	o->state = MST_ST_PROCESSING;
	*out = o;
	return 0;
}

int mst_obj_put_locked(struct mst_master *m, struct mst_shard *s, uint64_t client,
		       const struct mst_okey *k, const Lunar__PutStartRequest *rq,
		       Lunar__Replica ***reps, size_t *n)
{
	struct mst_tenant *t;
	struct mst_object *o;
	int rc = mst_obj_room(s);

	if (!rc)
		rc = mst_tenant_charge(m, k->buf, rq->size, &t);
	if (rc)
		return rc;
	rc = obj_create(m, client, k, rq, &o);
	if (!rc) {
		o->tenant = t;
		rc = mst_replicas_pb(o->reps, o->nrep, LUNAR__REPLICA_STATE__PROCESSING, reps, n);
		if (!rc &&
		    mst_caps_grant(m, o, o->reps, o->nrep, *reps, *n, MST_CAP_WRITE, o->version,
				   mst_cap_clock_ms() + m->cfg.put_start_discard_timeout_ms)) {
			mst_replicas_pb_free(*reps, *n);
			*reps = NULL;
			*n = 0;
			rc = -ENOMEM;
		}
		if (rc) {
			mst_replicas_free(m, o->reps, o->nrep);
			obj_free(o);
		}
	}
	if (rc) {
		mst_tenant_uncharge(m, t, rq->size);
		return rc;
	}
	shard_insert(s, o);
	counter_add(m, MST_ST_PROCESSING, 1);
	return 0;
}

static int put_start_try(struct mst_master *m, uint64_t client, const struct mst_okey *k,
			 const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n)
{
	struct mst_shard *s = &m->shards[k->hash % MST_SHARDS];
	struct mst_object **pp, *o;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	pp = mst_obj_find_key(s, k);
	o = *pp;
	if (o && o->state == MST_ST_COMPLETE) {
		/* Someone made these bytes again: the object is in use, so it
		 * moves to the back of the eviction order (no lease granted). */
		o->used_ms = lc_now_ms();
		rc = LUNAR_ERR_OBJECT_ALREADY_EXISTS;
	} else if (o && lc_now_ms() - o->put_start_ms < m->cfg.put_start_discard_timeout_ms) {
		rc = LUNAR_ERR_OBJECT_ALREADY_EXISTS;
	} else if (o) {
		mst_obj_discard(m, s, pp); /* a put abandoned long ago: pre-empt it */
	}
	if (!rc)
		rc = mst_obj_put_locked(m, s, client, k, rq, reps, n);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* NO_AVAILABLE_HANDLE stays the code (engines act on it); the reason when
 * no segment could ever hold the value goes to the log, at most every 10 s. */
static void too_big_log(struct mst_master *m, uint64_t len)
{
	static _Atomic uint64_t last_ms;
	uint64_t now = lc_now_ms(), prev = atomic_load(&last_ms);

	if ((prev && now - prev < 10000) || !atomic_compare_exchange_strong(&last_ms, &prev, now))
		return;
	LC_INFO("master",
		"put refused (NO_AVAILABLE_HANDLE): value of %llu bytes is larger than "
		"any segment (largest %llu)",
		(unsigned long long)len, (unsigned long long)mst_segments_largest(m));
}

uint64_t mst_obj_too_large(struct mst_master *m, int rc, uint64_t len)
{
	if (rc != LUNAR_ERR_NO_AVAILABLE_HANDLE || mst_segments_could_hold(m, len))
		return 0;
	return mst_segments_largest(m);
}

int mst_obj_start(struct mst_master *m, uint64_t client, const char *tenant,
		  const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n,
		  mst_start_try_fn try_start)
{
	struct mst_okey k;
	struct mst_room room;
	int rc = mst_okey_make(&k, tenant, rq->key);

	if (rc)
		return rc;
	/* Each preferred name is looked up under the shard and segment locks. */
	if (!rq->size || rq->n_preferred_segments > MST_PREFERRED_MAX)
		return LUNAR_ERR_INVALID_PARAMS;
	mst_room_begin(m, &room);
	rc = try_start(m, client, &k, rq, reps, n);
	/* full: make room (no shard lock held now) and try again */
	while (rc == LUNAR_ERR_NO_AVAILABLE_HANDLE && mst_room_make(m, &room, rq->size))
		rc = try_start(m, client, &k, rq, reps, n);
	if (rc == LUNAR_ERR_NO_AVAILABLE_HANDLE && !mst_segments_could_hold(m, rq->size))
		too_big_log(m, rq->size);
	return rc;
}

int mst_obj_put_start(struct mst_master *m, uint64_t client, const char *tenant,
		      const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n)
{
	return mst_obj_start(m, client, tenant, rq, reps, n, put_start_try);
}

void mst_obj_name(struct mst_master *m, struct mst_object *o, const struct mst_okey *k)
{
	memcpy(o->kbuf, k->buf, k->len);
	o->klen = k->len;
	o->tlen = k->tlen;
	o->hash = k->hash;
	o->id = lc_fetch_add_relaxed(&m->next_obj_id, 1) + 1;
	o->version = o->id;
}

int mst_obj_lookup(struct mst_master *m, const char *tenant, const char *key, struct mst_shard **s,
		   struct mst_object ***pp)
{
	struct mst_okey k;
	int rc = mst_okey_make(&k, tenant, key);

	if (rc)
		return rc;
	*s = &m->shards[k.hash % MST_SHARDS];
	pthread_mutex_lock(&(*s)->lock);
	*pp = mst_obj_find_key(*s, &k);
	return 0;
}

int mst_obj_finish(struct mst_master *m, struct mst_shard *s, struct mst_object **pp,
		   uint64_t client, enum mst_end how, uint32_t crc)
{
	struct mst_object *o = *pp;
	int commit = how == MST_END_COMMIT;
	uint64_t now;

	if (!o)
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	if (o->writer != client)
		return LUNAR_ERR_ILLEGAL_CLIENT;
	/* A second PutEnd with the CRC32C committed is a no-op (a retry); with
	 * another, the bytes committed are not the caller's, and it is told so. */
	if (o->state == MST_ST_COMPLETE && !commit)
		return LUNAR_ERR_INVALID_PARAMS;
	if (o->state == MST_ST_COMPLETE)
		return crc == o->crc ? 0 : LUNAR_ERR_CHECKSUM_MISMATCH;
	if (!commit) {
		if (how == MST_END_REVOKE_LATE)
			mst_obj_release_late(m, o);
		mst_obj_erase(m, s, pp);
		return 0;
	}
	now = lc_now_ms();
	o->state = MST_ST_COMPLETE;
	o->crc = crc;
	o->lease_ms = o->used_ms = now; /* never read yet: as old as its commit */
	o->soft_pin_ms = o->soft_pin_ttl_ms ? now + o->soft_pin_ttl_ms : 0;
	counter_add(m, MST_ST_PROCESSING, -1);
	counter_add(m, MST_ST_COMPLETE, 1);
	mst_metrics_value_size(m, o->size);
	mst_offload_on_commit(m, o);
	return 0;
}

static int finish(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
		  enum mst_end how, uint32_t crc)
{
	struct mst_shard *s;
	struct mst_object **pp;
	int rc = mst_obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	rc = mst_obj_finish(m, s, pp, client, how, crc);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_put_end(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
		    uint32_t crc)
{
	struct mst_ha_decision decided;
	/* tests: a key refused as a leader whose fence lapsed refuses it */
	int rc = LC_FAILPOINT("master-put-end") ? LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS
						: mst_ha_may_commit(m, &decided);

	if (!rc && !(rc = finish(m, client, tenant, key, MST_END_COMMIT, crc)))
		mst_ha_committed(m, "put", tenant, key, &decided);
	return rc;
}

int mst_obj_put_revoke(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
		       int late)
{
	return finish(m, client, tenant, key, late ? MST_END_REVOKE_LATE : MST_END_REVOKE, 0);
}

/* A read lease for who; its number. Grants to one lessee in a row form its
 * run; the deadline before the run began covers every other lessee's. */
static uint64_t lease_grant(struct mst_master *m, struct mst_object *o,
			    const struct mst_lessee *who)
{
	uint64_t now = lc_now_ms(), until = now + m->cfg.kv_lease_ttl_ms;

	o->used_ms = now;
	if (who->holder != o->lease_holder || who->reader != o->lease_reader) {
		if (o->lease_ms > o->lease_prior_ms)
			o->lease_prior_ms = o->lease_ms;
		o->lease_holder = who->holder;
		o->lease_reader = who->reader;
	}
	if (until > o->lease_ms)
		o->lease_ms = until;
	o->lease_seq = lc_fetch_add_relaxed(&m->next_lease_seq, 1) + 1;
	return o->lease_seq;
}

int mst_obj_get(struct mst_master *m, const struct mst_lessee *who, const char *tenant,
		const char *key, Lunar__GetReplicaListResult *out)
{
	Lunar__Replica ***reps = &out->replicas;
	size_t *n = &out->n_replicas;
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = mst_obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (!o)
		rc = LUNAR_ERR_OBJECT_NOT_FOUND;
	else if (o->state != MST_ST_COMPLETE)
		rc = LUNAR_ERR_REPLICA_IS_NOT_READY;
	else
		rc = mst_obj_replicas_pb(o, LUNAR__REPLICA_STATE__COMPLETE, reps, n);
	if (!rc) {
		out->size = o->size;
		out->crc32c = o->crc;
		out->lease_seq = lease_grant(m, o, who);
		out->landing = o->beside_resv &&
			       mst_resv_landing(m, o->writer, o->beside_resv, o->reps, o->nrep);
		/* landed, or no byte can land any more: no more lookups */
		if (!out->landing)
			o->beside_resv = 0;
		/* The grants end with the lease: a reader past it rereads anyway. */
		if (mst_caps_grant(m, o, o->reps, o->nrep, *reps, *n, MST_CAP_READ, o->version,
				   o->lease_ms)) {
			mst_replicas_pb_free(*reps, *n);
			*reps = NULL;
			*n = 0;
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_exist(struct mst_master *m, const struct mst_lessee *who, const char *tenant,
		  const char *key)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = mst_obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (o && o->state == MST_ST_COMPLETE) {
		lease_grant(m, o, who);
		rc = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_lease_release(struct mst_master *m, const struct mst_lessee *who, const char *tenant,
			  const char *key, uint64_t seq)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc;

	if (!who->holder)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = mst_obj_lookup(m, tenant, key, &s, &pp);
	if (rc)
		return rc;
	o = *pp;
	if (!o) {
		rc = LUNAR_ERR_OBJECT_NOT_FOUND;
	} else if (o->lease_holder != who->holder || o->lease_reader != who->reader ||
		   o->lease_seq != seq) {
		rc = LUNAR_ERR_OBJECT_HAS_LEASE;
	} else {
		o->lease_ms = o->lease_prior_ms;
		o->lease_holder = o->lease_reader = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_remove(struct mst_master *m, const char *tenant, const char *key, int force)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = mst_obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (!o)
		rc = LUNAR_ERR_OBJECT_NOT_FOUND;
	else if (o->state != MST_ST_COMPLETE || mst_obj_busy(o))
		rc = LUNAR_ERR_REPLICA_IS_NOT_READY; /* even forced: a writer is at work */
	else if (!force && o->lease_ms > lc_now_ms())
		rc = LUNAR_ERR_OBJECT_HAS_LEASE;
	else
		mst_obj_erase(m, s, pp);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

static uint64_t remaining(uint64_t deadline, uint64_t now)
{
	return deadline > now ? deadline - now : 0;
}

int mst_obj_stat(struct mst_master *m, const char *tenant, const char *key, Lunar__StatKeyReply *r)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	uint64_t now = lc_now_ms();
	int rc = mst_obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (!o) {
		rc = LUNAR_ERR_OBJECT_NOT_FOUND;
		goto out_unlock;
	}
	r->state = o->state == MST_ST_COMPLETE ? LUNAR__REPLICA_STATE__COMPLETE
					       : LUNAR__REPLICA_STATE__PROCESSING;
	rc = mst_obj_replicas_pb(o, r->state, &r->replicas, &r->n_replicas);
	if (rc)
		goto out_unlock;
	r->size = o->size;
	r->lease_remaining_ms = remaining(o->lease_ms, now);
	r->hard_pin = o->hard_pin;
	r->soft_pin_remaining_ms =
	    o->state == MST_ST_COMPLETE ? remaining(o->soft_pin_ms, now) : o->soft_pin_ttl_ms;
	r->crc32c = o->crc;
	r->writer = o->up ? o->up->writer : o->writer;
out_unlock:
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* The walk starts just after an empty slot: no run then wraps past its
 * start, so the objects an erase moves back come from slots not yet
 * visited, and the slot erased is looked at again. */
int64_t mst_shard_sweep(struct mst_master *m, size_t i, mst_visit_fn fn, void *arg)
{
	struct mst_shard *s = &m->shards[i];
	int64_t erased = 0;
	size_t start = 0, mask;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	mask = s->cap - 1;
	while (s->slots[start].o)
		start++;
	for (size_t k = 1; k <= s->cap && rc >= 0; k++) {
		struct mst_object **pp = &s->slots[(start + k) & mask].o;

		mst_obj_prefetch(s->slots[(start + k + MST_PREFETCH_AHEAD) & mask].o);
		while (*pp && (rc = fn(m, *pp, arg)) == 1) {
			mst_obj_erase(m, s, pp);
			erased++;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return erased;
}
