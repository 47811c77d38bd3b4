/*
 * commit.c - BatchPutCommit, the one master call of a put-ahead put: the
 * proxy wrote each value into space reserved for it (resv.c), or is
 * writing it, and here each becomes a COMPLETE object at once, its range
 * carved out of the reservation, with the same checks a PutStart makes (a
 * key committed or being written, the tenant's quota). A refused item's
 * piece stays reserved for the proxy to use again. Every field is the
 * caller's word: the range must lie inside what the caller's own
 * reservation still holds. A commit sent beside its write marks the object
 * (beside_resv): while its bytes may still land, its range stays out of use
 * even if it goes (mst_obj_reps_free, mst_resv_hold), and BatchPutUncommit
 * takes it back if the write failed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "lunar.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "mst_obj.h"
#include "rpc.h"

/* A COMPLETE object of k for it, its one replica rep (taken). */
static struct mst_object *make(struct mst_master *m, const struct mst_okey *k, uint64_t client,
			       const Lunar__PutCommitItem *it, const struct mst_replica *rep,
			       struct mst_tenant *t)
{
	struct mst_object *o = calloc(1, sizeof(*o) + k->len + 1);
	uint64_t now = lc_now_ms();

	if (!o || !(o->reps = malloc(sizeof(*rep)))) {
		free(o);
		return NULL;
	}
	o->reps[0] = *rep;
	o->nrep = 1;
	mst_obj_name(m, o, k);
	o->size = it->size;
	o->crc = it->crc32c;
	o->writer = client;
	o->tenant = t;
	o->put_start_ms = now;
	o->lease_ms = o->used_ms = now; /* never read yet: as old as its commit */
	o->hard_pin = it->hard_pin;
	o->soft_pin_ttl_ms = mst_soft_pin_ttl(m, it->soft_pin, it->soft_pin_ttl_ms);
	o->soft_pin_ms = o->soft_pin_ttl_ms ? now + o->soft_pin_ttl_ms : 0;
	o->state = MST_ST_COMPLETE;
	o->beside_resv = it->beside ? it->reservation : 0;
	return o;
}

/* Is k free to be put (PutStart's rule)? 0 or OBJECT_ALREADY_EXISTS; a put
 * abandoned long ago is pre-empted. Shard lock held. */
static int key_free(struct mst_master *m, struct mst_shard *s, const struct mst_okey *k)
{
	struct mst_object **pp = mst_obj_find_key(s, k), *o = *pp;

	if (o && o->state == MST_ST_COMPLETE) {
		o->used_ms = lc_now_ms(); /* made again: in use (as at PutStart) */
		return LUNAR_ERR_OBJECT_ALREADY_EXISTS;
	}
	if (o && lc_now_ms() - o->put_start_ms < m->cfg.put_start_discard_timeout_ms)
		return LUNAR_ERR_OBJECT_ALREADY_EXISTS;
	if (o)
		mst_obj_discard(m, s, pp);
	return 0;
}

/* Commit one item under its shard lock; its code, and on 0 its replica
 * for the reply in res. */
static int commit_locked(struct mst_master *m, struct mst_shard *s, uint64_t client,
			 const struct mst_okey *k, const Lunar__PutCommitItem *it,
			 Lunar__PutStartResult *res)
{
	struct mst_replica rep;
	struct mst_tenant *t;
	struct mst_object *o;
	int rc = key_free(m, s, k);

	if (!rc)
		rc = mst_obj_room(s);
	if (!rc)
		rc = mst_tenant_charge(m, k->buf, it->size, &t);
	if (rc)
		return rc;
	rc = mst_resv_carve(m, client, it->reservation, it->offset, it->size, &rep);
	if (rc) {
		mst_tenant_uncharge(m, t, it->size);
		return rc;
	}
	o = make(m, k, client, it, &rep, t);
	if (!o) {
		/* written, but no object: the piece is free (nothing writes it) */
		mst_replica_free(m, &rep);
		mst_tenant_uncharge(m, t, it->size);
		return -ENOMEM;
	}
	mst_obj_insert(m, s, o);
	mst_metrics_value_size(m, o->size);
	mst_offload_on_commit(m, o);
	/* Committed now; a reply without its replica only costs the proxy's
	 * HA index the entry. */
	if (!mst_replicas_pb(o->reps, 1, LUNAR__REPLICA_STATE__COMPLETE, &res->replicas,
			     &res->n_replicas))
		res->replicas[0]->version = o->version;
	return 0;
}

static int commit_one(struct mst_master *m, uint64_t client, const char *tenant,
		      const Lunar__PutCommitItem *it, Lunar__PutStartResult *res)
{
	struct mst_shard *s;
	struct mst_okey k;
	struct mst_ha_decision decided;
	int rc = mst_okey_make(&k, tenant, it->key);

	if (rc)
		return rc;
	if (!it->size)
		return LUNAR_ERR_INVALID_PARAMS;
	/* Each key checked as it commits: the batch's check came before
	 * all of them, and the master may have frozen since. */
	if ((rc = mst_ha_may_commit(m, &decided)))
		return rc;
	s = &m->shards[k.hash % MST_SHARDS];
	pthread_mutex_lock(&s->lock);
	rc = commit_locked(m, s, client, &k, it, res);
	pthread_mutex_unlock(&s->lock);
	if (!rc)
		mst_ha_committed(m, "put", tenant, it->key, &decided);
	return mst_code(rc);
}

int mst_batch_put_commit(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__BatchPutCommitRequest *rq = (const void *)req;
	int bad =
	    rq->n_items > LUNAR_BATCH_MAX ? LUNAR_ERR_INVALID_PARAMS : mst_ha_may_commit(m, NULL);
	Lunar__BatchPutStartReply *r =
	    (void *)lp_reply_new(&lunar__batch_put_start_reply__descriptor, bad, MST_VIEW);

	if (!r)
		return -ENOMEM;
	*rep = &r->base;
	if (bad || !rq->n_items)
		return 0;
	/* Every result allocated before any commit: a commit is never lost
	 * to a reply that could not be made. */
	r->results = calloc(rq->n_items, sizeof(*r->results));
	for (size_t i = 0; r->results && i < rq->n_items; i++) {
		if (!(r->results[i] = malloc(sizeof(*r->results[i]))))
			break;
		lunar__put_start_result__init(r->results[i]);
		r->n_results = i + 1;
	}
	if (r->n_results != rq->n_items) {
		protobuf_c_message_free_unpacked(&r->base, NULL);
		return -ENOMEM;
	}
	for (size_t i = 0; i < rq->n_items; i++)
		r->results[i]->code = commit_one(m, rq->client_id, mst_tenant_name(rq->tenant),
						 rq->items[i], r->results[i]);
	return 0;
}

/* Take back item, committed beside a write that failed, if it is still
 * that object: it goes, its range given back late (bytes may still land). */
static int uncommit_one(struct mst_master *m, uint64_t client, const char *tenant,
			const Lunar__PutCommitItem *it)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = mst_obj_lookup(m, tenant, it->key, &s, &pp);

	if (rc)
		return mst_code(rc);
	o = *pp;
	if (!o)
		rc = LUNAR_ERR_OBJECT_NOT_FOUND;
	else if (o->state != MST_ST_COMPLETE || o->writer != client || !it->reservation ||
		 o->beside_resv != it->reservation || o->nrep != 1 || o->reps[0].off != it->offset)
		rc = LUNAR_ERR_ILLEGAL_CLIENT;
	if (!rc) {
		mst_obj_release_late(m, o);
		mst_obj_erase(m, s, pp);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_batch_put_uncommit(struct mst_master *m, const ProtobufCMessage *req,
			   ProtobufCMessage **rep)
{
	const Lunar__BatchPutCommitRequest *rq = (const void *)req;
	int bad = rq->n_items > LUNAR_BATCH_MAX ? LUNAR_ERR_INVALID_PARAMS : 0;
	Lunar__BatchCodesReply *r =
	    (void *)lp_reply_new(&lunar__batch_codes_reply__descriptor, bad, MST_VIEW);

	if (!r)
		return -ENOMEM;
	*rep = &r->base;
	if (bad || !rq->n_items)
		return 0;
	if (!(r->codes = calloc(rq->n_items, sizeof(*r->codes)))) {
		protobuf_c_message_free_unpacked(&r->base, NULL);
		return -ENOMEM;
	}
	r->n_codes = rq->n_items;
	for (size_t i = 0; i < rq->n_items; i++)
		r->codes[i] =
		    uncommit_one(m, rq->client_id, mst_tenant_name(rq->tenant), rq->items[i]);
	return 0;
}
