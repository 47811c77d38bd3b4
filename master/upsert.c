/*
 * upsert.c - UpsertStart/End/Revoke. A key that is absent is put as by
 * PutStart. A COMPLETE key gets NEW replicas (never space a reader may be
 * reading); the old replicas stay readable until UpsertEnd swaps in the new
 * ones in one step under the shard lock, and their space is given back only
 * after the object's lease deadline (readers that got the old list finish
 * first). Readers thus see the old bytes or the new ones, never a mix.
 *
 * A key being put or upserted by anyone (the same writer included) refuses a
 * new upsert with REPLICA_IS_NOT_READY, as a read of it would, until
 * put_start_discard_timeout has passed: then the stale write is pre-empted
 * like a stale put.
 */
#include <errno.h>
#include <stdlib.h>

#include "atomic.h"
#include "clock.h"
#include "lunar.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "mst_obj.h"

/* The write in flight on o is stale enough to pre-empt. */
static int stale(const struct mst_master *m, uint64_t start_ms, uint64_t now)
{
	return now - start_ms >= m->cfg.put_start_discard_timeout_ms;
}

/* Drop a stale upsert: its writer may still write, so its space goes late. */
static void upsert_discard(struct mst_master *m, struct mst_object *o)
{
	struct mst_upsert *up = o->up;

	mst_deferred_add(m, up->reps, up->nrep, up->start_ms + m->cfg.put_start_release_timeout_ms);
	mst_tenant_uncharge(m, o->tenant, up->size);
	free(up);
	o->up = NULL;
	lc_fetch_add_relaxed(&m->ctr.discarded_puts, 1);
}

/* New replicas for the COMPLETE object o; 0 with the reply replicas. */
static int upsert_place(struct mst_master *m, struct mst_object *o, uint64_t client,
			const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n)
{
	unsigned want = rq->replica_num ? rq->replica_num : 1;
	struct mst_upsert *up = calloc(1, sizeof(*up));
	struct mst_tenant *t;
	int rc;

	if (want > MST_MAX_REPLICAS)
		want = MST_MAX_REPLICAS;
	if (!up || !(up->reps = calloc(want, sizeof(*up->reps)))) {
		free(up);
		return -ENOMEM;
	}
	rc = mst_tenant_charge(m, o->kbuf, rq->size, &t);
	if (!rc) {
		rc = mst_place(m, client, rq->size, want, rq->preferred_segments,
			       rq->n_preferred_segments, up->reps);
		if (rc < 0)
			mst_tenant_uncharge(m, t, rq->size);
	}
	if (rc >= 0) {
		up->nrep = (unsigned)rc;
		up->version = lc_fetch_add_relaxed(&m->next_obj_id, 1) + 1;
		rc = mst_replicas_pb(up->reps, up->nrep, LUNAR__REPLICA_STATE__PROCESSING, reps, n);
		if (!rc &&
		    mst_caps_grant(m, o, up->reps, up->nrep, *reps, *n, MST_CAP_WRITE, up->version,
				   mst_cap_clock_ms() + m->cfg.put_start_discard_timeout_ms)) {
			mst_replicas_pb_free(*reps, *n);
			*reps = NULL;
			*n = 0;
			rc = -ENOMEM;
		}
		if (rc) {
			mst_replicas_free(m, up->reps, up->nrep);
			mst_tenant_uncharge(m, t, rq->size);
		}
	}
	if (rc) {
		free(up->reps);
		free(up);
		return rc;
	}
	up->writer = client;
	up->size = rq->size;
	up->start_ms = lc_now_ms();
	up->hard_pin = rq->hard_pin;
	up->soft_pin = rq->soft_pin;
	up->soft_pin_ttl_ms = mst_soft_pin_ttl(m, rq->soft_pin, rq->soft_pin_ttl_ms);
	o->up = up;
	return 0;
}

static int upsert_start_try(struct mst_master *m, uint64_t client, const struct mst_okey *k,
			    const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n)
{
	struct mst_shard *s = &m->shards[k->hash % MST_SHARDS];
	struct mst_object **pp, *o;
	uint64_t now = lc_now_ms();
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	pp = mst_obj_find_key(s, k);
	o = *pp;
	if (o && o->state == MST_ST_PROCESSING) {
		if (!stale(m, o->put_start_ms, now))
			rc = LUNAR_ERR_REPLICA_IS_NOT_READY;
		else
			mst_obj_discard(m, s, pp);
		o = NULL;
	} else if (o && o->up) {
		if (!stale(m, o->up->start_ms, now))
			rc = LUNAR_ERR_REPLICA_IS_NOT_READY;
		else
			upsert_discard(m, o);
	}
	if (!rc)
		rc = o ? upsert_place(m, o, client, rq, reps, n)
		       : mst_obj_put_locked(m, s, client, k, rq, reps, n);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_upsert_start(struct mst_master *m, uint64_t client, const char *tenant,
			 const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n)
{
	return mst_obj_start(m, client, tenant, rq, reps, n, upsert_start_try);
}

void mst_upsert_abandon(struct mst_master *m, struct mst_object *o)
{
	mst_deferred_add(m, o->up->reps, o->up->nrep,
			 o->up->start_ms + m->cfg.put_start_release_timeout_ms);
	o->up->reps = NULL;
	o->up->nrep = 0;
	mst_upsert_cancel(m, o);
}

void mst_upsert_cancel(struct mst_master *m, struct mst_object *o)
{
	/* nobody has read the new ranges and their writer is done with them */
	mst_replicas_free(m, o->up->reps, o->up->nrep);
	mst_tenant_uncharge(m, o->tenant, o->up->size);
	free(o->up->reps);
	free(o->up);
	o->up = NULL;
}

/* Swap the new replicas in; the old ones go back after the lease. */
static void upsert_commit(struct mst_master *m, struct mst_object *o, uint32_t crc)
{
	struct mst_upsert *up = o->up;
	uint64_t now = lc_now_ms();

	mst_obj_reps_free(m, o, o->lease_ms);
	mst_tenant_uncharge(m, o->tenant, o->size);
	o->reps = up->reps;
	o->nrep = up->nrep;
	o->size = up->size;
	o->writer = up->writer;
	o->crc = crc;
	o->version = up->version;
	o->hard_pin = up->hard_pin;
	o->soft_pin_ttl_ms = up->soft_pin_ttl_ms;
	o->soft_pin_ms = up->soft_pin_ttl_ms ? now + up->soft_pin_ttl_ms : 0;
	if (o->lease_ms < now)
		o->lease_ms = now;
	o->used_ms = now;
	free(up);
	o->up = NULL;
	/* disk copies hold the old value: their owners delete them (and would
	 * have them refused at re-registration); a task in flight is refused
	 * at OffloadDone */
	mst_offload_forget(m, o);
	mst_disk_reps_free(o);
	o->offload_to = 0;
	o->offload_failed = 0;
	mst_metrics_value_size(m, o->size);
	mst_offload_on_commit(m, o);
}

/* UpsertEnd (commit) or UpsertRevoke by client. */
static int upsert_finish(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
			 enum mst_end how, uint32_t crc)
{
	struct mst_shard *s;
	struct mst_object **pp, *o;
	int rc = mst_obj_lookup(m, tenant, key, &s, &pp);

	if (rc)
		return rc;
	o = *pp;
	if (!o || !o->up)
		rc = mst_obj_finish(m, s, pp, client, how, crc); /* an upsert that was a put */
	else if (o->up->writer != client)
		rc = LUNAR_ERR_ILLEGAL_CLIENT;
	else if (how == MST_END_COMMIT)
		upsert_commit(m, o, crc);
	else if (how == MST_END_REVOKE_LATE)
		mst_upsert_abandon(m, o);
	else
		mst_upsert_cancel(m, o);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int mst_obj_upsert_end(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
		       uint32_t crc)
{
	struct mst_ha_decision decided;
	int rc = mst_ha_may_commit(m, &decided);

	if (!rc && !(rc = upsert_finish(m, client, tenant, key, MST_END_COMMIT, crc)))
		mst_ha_committed(m, "upsert", tenant, key, &decided);
	return rc;
}

int mst_obj_upsert_revoke(struct mst_master *m, uint64_t client, const char *tenant,
			  const char *key, int late)
{
	return upsert_finish(m, client, tenant, key, late ? MST_END_REVOKE_LATE : MST_END_REVOKE,
			     0);
}
