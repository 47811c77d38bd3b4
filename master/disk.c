/*
 * disk.c - LOCAL_DISK replicas: records in a proxy's SSD tier. A proxy adds
 * them when an offload task is done (OffloadDone) or when it finds records
 * at restart (DiskReplicasAdd: objects the master does not know come back
 * with only that replica), and takes them away before it deletes a bucket
 * or when an offload failed (DiskReplicasRemove). An object lives while it
 * has a replica of either type; readers see MEMORY replicas first.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "lunar.h"
#include "mst_int.h"
#include "mst_obj.h"
#include "rpc.h"

/* The proxy a disk call came from, as its LOCAL_DISK replicas name it. */
struct disk_owner {
	uint64_t client;
	char *segment, *endpoint;
};

void mst_disk_reps_free(struct mst_object *o)
{
	for (unsigned i = 0; i < o->ndisk; i++) {
		free(o->disk[i].segment);
		free(o->disk[i].endpoint);
	}
	free(o->disk);
	o->disk = NULL;
	o->ndisk = 0;
}

static Lunar__Replica *disk_pb(const struct mst_object *o, const struct mst_disk_replica *d,
			       Lunar__ReplicaState st)
{
	Lunar__Replica *p = malloc(sizeof(*p));

	if (!p)
		return NULL;
	lunar__replica__init(p);
	p->type = LUNAR__REPLICA_TYPE__LOCAL_DISK;
	p->state = st;
	p->offset = d->location;
	p->length = o->size;
	p->segment = strdup(d->segment);
	p->endpoint = strdup(d->endpoint);
	if (!p->segment || !p->endpoint) {
		protobuf_c_message_free_unpacked(&p->base, NULL);
		return NULL;
	}
	return p;
}

int mst_obj_replicas_pb(const struct mst_object *o, Lunar__ReplicaState st, Lunar__Replica ***out,
			size_t *nout)
{
	Lunar__Replica **v;
	size_t n;
	int rc = mst_replicas_pb(o->reps, o->nrep, st, &v, &n);

	if (rc || !o->ndisk) {
		*out = v;
		*nout = n;
		return rc;
	}
	/* n MEMORY replicas first, then the LOCAL_DISK ones */
	Lunar__Replica **w = realloc(v, (n + o->ndisk) * sizeof(*w));

	if (!w)
		goto err;
	v = w;
	for (unsigned i = 0; i < o->ndisk; i++, n++)
		if (!(v[n] = disk_pb(o, &o->disk[i], st)))
			goto err;
	*out = v;
	*nout = n;
	return 0;
err:
	while (n--)
		protobuf_c_message_free_unpacked(&v[n]->base, NULL);
	free(v);
	return -ENOMEM;
}

void mst_obj_drop_memory(struct mst_master *m, struct mst_object *o)
{
	uint64_t bytes = 0;

	for (unsigned i = 0; i < o->nrep; i++)
		bytes += o->reps[i].len;
	mst_obj_reps_free(m, o, 0);
	lc_fetch_add_relaxed(&m->ctr.evictions, 1);
	lc_fetch_add_relaxed(&m->ctr.evicted_bytes, bytes);
}

/* Index of client's replica in o->disk, or -1. */
static int disk_find(const struct mst_object *o, uint64_t client)
{
	for (unsigned i = 0; i < o->ndisk; i++)
		if (o->disk[i].owner == client)
			return (int)i;
	return -1;
}

static void disk_unlink(struct mst_object *o, int i)
{
	free(o->disk[i].segment);
	free(o->disk[i].endpoint);
	o->disk[i] = o->disk[--o->ndisk];
}

int mst_disk_forget_client(struct mst_object *o, uint64_t client)
{
	int i = disk_find(o, client);

	if (o->offload_to == client) {
		o->offload_to = 0;
		o->offload_evict = 0;
	}
	if (i < 0)
		return 0;
	disk_unlink(o, i);
	return 1;
}

/* Add (or move) w's replica of o at location. 0 or -ENOMEM. */
static int disk_set(struct mst_object *o, const struct disk_owner *w, uint64_t location)
{
	int i = disk_find(o, w->client);
	struct mst_disk_replica *v, d = {.owner = w->client, .location = location};

	if (i >= 0) {
		o->disk[i].location = location;
		return 0;
	}
	d.segment = strdup(w->segment);
	d.endpoint = strdup(w->endpoint);
	v = realloc(o->disk, (o->ndisk + 1) * sizeof(*v));
	if (!d.segment || !d.endpoint || !v) {
		free(d.segment);
		free(d.endpoint);
		if (v)
			o->disk = v;
		return -ENOMEM;
	}
	o->disk = v;
	o->disk[o->ndisk++] = d;
	return 0;
}

/* The object's MEMORY may go now: nobody holds it (lease, pins, upsert). */
static int memory_idle(const struct mst_object *o, uint64_t now)
{
	return o->lease_ms <= now && !o->hard_pin && o->soft_pin_ms <= now && !o->up;
}

/* One record of OffloadDone: o (NULL if absent) now has w's disk copy. */
static int offload_done(struct mst_master *m, struct mst_object *o, const struct disk_owner *w,
			const Lunar__DiskRecord *rec)
{
	int rc, evict;

	if (!o || o->state != MST_ST_COMPLETE)
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	if (o->size != rec->size || o->crc != rec->crc32c)
		return LUNAR_ERR_CHECKSUM_MISMATCH; /* a copy of an older value */
	rc = disk_set(o, w, rec->location);
	evict = o->offload_to == w->client && o->offload_evict;
	if (o->offload_to == w->client) {
		o->offload_to = 0;
		o->offload_evict = 0;
	}
	if (!rc) {
		lc_fetch_add_relaxed(&m->ctr.offload_done, 1);
		/* on_evict: eviction wanted this MEMORY back; it may go now */
		if (evict && o->nrep && memory_idle(o, lc_now_ms()))
			mst_obj_drop_memory(m, o);
	}
	return rc;
}

/* One record of DiskReplicasRemove: w drops (or never wrote) its copy. */
static int disk_remove(struct mst_master *m, struct mst_shard *s, struct mst_object **pp,
		       const struct disk_owner *w, const Lunar__DiskRecord *rec)
{
	struct mst_object *o = *pp;
	int i;

	if (!o)
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	if (o->offload_to == w->client) {
		o->offload_to = 0;
		o->offload_evict = 0;
		o->offload_failed = 1;
		lc_fetch_add_relaxed(&m->ctr.offload_failed, 1);
	}
	i = disk_find(o, w->client);
	if (i >= 0 && o->disk[i].location == rec->location)
		disk_unlink(o, i);
	if (o->state == MST_ST_COMPLETE && !o->nrep && !o->ndisk && !o->up)
		mst_obj_erase(m, s, pp);
	return 0;
}

/* A COMPLETE object with only w's disk copy, for a record found at restart. */
static int disk_create(struct mst_master *m, struct mst_shard *s, const struct mst_okey *k,
		       const struct disk_owner *w, const Lunar__DiskRecord *rec)
{
	struct mst_object *o;
	struct mst_tenant *t;
	uint64_t now = lc_now_ms();
	int rc;

	if (!rec->size)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = mst_obj_room(s);
	if (!rc)
		rc = mst_tenant_charge(m, k->buf, rec->size, &t);
	if (rc)
		return rc;
	o = calloc(1, sizeof(*o) + k->len + 1);
	if (!o || disk_set(o, w, rec->location)) {
		if (o)
			mst_disk_reps_free(o);
		free(o);
		mst_tenant_uncharge(m, t, rec->size);
		return -ENOMEM;
	}
	mst_obj_name(m, o, k);
	o->size = rec->size;
	o->crc = rec->crc32c;
	o->writer = w->client;
	o->put_start_ms = o->lease_ms = o->used_ms = now;
	o->tenant = t;
	o->state = MST_ST_COMPLETE;
	mst_obj_insert(m, s, o);
	return 0;
}

/* One record of DiskReplicasAdd. */
static int disk_add(struct mst_master *m, struct mst_shard *s, struct mst_object **pp,
		    const struct mst_okey *k, const struct disk_owner *w,
		    const Lunar__DiskRecord *rec)
{
	struct mst_object *o = *pp;

	if (!o)
		return disk_create(m, s, k, w, rec);
	if (o->state != MST_ST_COMPLETE)
		return LUNAR_ERR_REPLICA_IS_NOT_READY;
	if (o->size != rec->size || o->crc != rec->crc32c)
		return LUNAR_ERR_OBJECT_ALREADY_EXISTS; /* the copy is of another value */
	return disk_set(o, w, rec->location);
}

static int one_record(struct mst_master *m, uint32_t method, const struct disk_owner *w,
		      const Lunar__DiskRecord *rec)
{
	struct mst_okey k;
	struct mst_shard *s;
	struct mst_object **pp;
	int rc = mst_okey_make(&k, rec->tenant, rec->key);

	if (rc)
		return rc;
	s = &m->shards[k.hash % MST_SHARDS];
	pthread_mutex_lock(&s->lock);
	pp = mst_obj_find_key(s, &k);
	switch (method) {
	case LUNAR__METHOD__OFFLOAD_DONE: rc = offload_done(m, *pp, w, rec); break;
	case LUNAR__METHOD__DISK_REPLICAS_REMOVE: rc = disk_remove(m, s, pp, w, rec); break;
	default: rc = disk_add(m, s, pp, &k, w, rec); break;
	}
	pthread_mutex_unlock(&s->lock);
	if (method != LUNAR__METHOD__DISK_REPLICAS_ADD)
		mst_offload_end(m, w->client, &k);
	return mst_code(rc);
}

/* Who is calling: a known proxy with a mounted segment, or a code. */
static int owner_of(struct mst_master *m, uint32_t method, uint64_t client, struct disk_owner *w)
{
	int rc;

	w->client = client;
	w->segment = w->endpoint = NULL;
	if (!client || !mst_client_alive(m, client))
		return LUNAR_ERR_ILLEGAL_CLIENT;
	rc = mst_segment_of_client(m, client, &w->segment, &w->endpoint);
	if (!rc && method == LUNAR__METHOD__DISK_REPLICAS_ADD)
		rc = mst_offload_register(m, client);
	return rc;
}

int mst_disk_dispatch(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		      ProtobufCMessage **rep)
{
	const Lunar__DiskRecordsRequest *rq = (const void *)req;
	Lunar__BatchCodesReply *r;
	struct disk_owner w = {0}; /* freed below, also when never filled */
	int rc;

	if (method != LUNAR__METHOD__OFFLOAD_DONE &&
	    method != LUNAR__METHOD__DISK_REPLICAS_REMOVE &&
	    method != LUNAR__METHOD__DISK_REPLICAS_ADD)
		return LUNAR_ERR_PROTOCOL;
	rc = rq->n_records > LUNAR_BATCH_MAX ? LUNAR_ERR_INVALID_PARAMS
					     : owner_of(m, method, rq->client_id, &w);
	r = (void *)lp_reply_new(&lunar__batch_codes_reply__descriptor, mst_code(rc), MST_VIEW);
	if (r && !rc && rq->n_records && !(r->codes = calloc(rq->n_records, sizeof(*r->codes)))) {
		protobuf_c_message_free_unpacked(&r->base, NULL);
		r = NULL;
	}
	for (size_t i = 0; r && !rc && i < rq->n_records; i++)
		r->codes[r->n_codes++] = one_record(m, method, &w, rq->records[i]);
	free(w.segment);
	free(w.endpoint);
	if (!r)
		return -ENOMEM;
	*rep = &r->base;
	return 0;
}
