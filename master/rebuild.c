/*
 * rebuild.c - the new leader's side of "no cache lost on failover" (SPEC
 * §14): ReportObjects recreates COMPLETE objects from what proxies report
 * after they re-mount (docs/architecture.md). Each placement takes exactly
 * its reported range in its segment's allocator, so new puts never land on
 * reported bytes; an object is readable as soon as its batch is in. Per
 * key the highest version wins (a new leader numbers versions above every
 * older view's, see ha.c); a range already taken refuses the report.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "mst_obj.h"
#include "rpc.h"

#define REPORT_MAX 65536 /* objects in one call */

static int has_range(const struct mst_object *o, const struct mst_replica *r)
{
	for (unsigned i = 0; i < o->nrep; i++)
		if (o->reps[i].seg == r->seg && o->reps[i].off == r->off)
			return 1;
	return 0;
}

/* Take the reported ranges of ro into reps (up to MST_MAX_REPLICAS); the
 * number taken, or a code when none could be (the first failure's). */
static int take_ranges(struct mst_master *m, const Lunar__ReportedObject *ro,
		       struct mst_replica *reps)
{
	int n = 0, first = 0, rc;

	for (size_t i = 0; i < ro->n_placements && n < MST_MAX_REPLICAS; i++) {
		const Lunar__Placement *p = ro->placements[i];

		if (!p->segment || p->length < ro->size)
			rc = LUNAR_ERR_INVALID_PARAMS;
		else
			rc = mst_segment_take_at(m, p->segment, p->offset, ro->size, &reps[n]);
		if (!rc)
			n++;
		else if (!first)
			first = rc == -EEXIST	? LUNAR_ERR_NO_AVAILABLE_HANDLE
				: rc == -ENOMEM ? LUNAR_ERR_INTERNAL
				: rc == -EINVAL ? LUNAR_ERR_INVALID_PARAMS
						: rc; /* SEGMENT_NOT_FOUND */
	}
	return n ? n : first ? first : LUNAR_ERR_INVALID_PARAMS;
}

/* Add the new ranges of reps to the known object o (same version). */
static void merge(struct mst_master *m, struct mst_object *o, struct mst_replica *reps, int n)
{
	struct mst_replica *v = realloc(o->reps, (o->nrep + (unsigned)n) * sizeof(*v));
	int added = 0;

	if (!v) {
		mst_replicas_free(m, reps, (unsigned)n);
		return;
	}
	o->reps = v;
	for (int i = 0; i < n; i++) {
		if (has_range(o, &reps[i]) || o->nrep >= MST_MAX_REPLICAS) {
			mst_replica_free(m, &reps[i]);
			continue;
		}
		o->reps[o->nrep++] = reps[i];
		added = 1;
	}
	if (added)
		lc_fetch_add_relaxed(&m->rebuild.merged, 1);
}

/* A COMPLETE object for ro with the n ranges of reps (taken from them). */
static int create(struct mst_master *m, struct mst_shard *s, const struct mst_okey *k,
		  const Lunar__ReportedObject *ro, uint64_t client, struct mst_replica *reps, int n)
{
	uint64_t now = lc_now_ms();
	struct mst_object *o;
	struct mst_tenant *t;
	int rc = mst_obj_room(s);

	if (!rc)
		rc = mst_tenant_charge(m, k->buf, ro->size, &t);
	if (rc)
		return rc < 0 ? LUNAR_ERR_INTERNAL : rc;
	o = calloc(1, sizeof(*o) + k->len + 1);
	if (!o || !(o->reps = malloc((size_t)n * sizeof(*reps)))) {
		free(o);
		mst_tenant_uncharge(m, t, ro->size);
		return LUNAR_ERR_INTERNAL;
	}
	memcpy(o->reps, reps, (size_t)n * sizeof(*reps));
	o->nrep = (unsigned)n;
	mst_obj_name(m, o, k);
	o->version = ro->version; /* the reported one: readers compare it */
	o->size = ro->size;
	o->crc = ro->crc32c;
	o->writer = client;
	o->tenant = t;
	o->put_start_ms = o->lease_ms = o->used_ms = now;
	o->hard_pin = ro->hard_pin;
	o->soft_pin_ttl_ms = mst_soft_pin_ttl(m, ro->soft_pin_ttl_ms != 0, ro->soft_pin_ttl_ms);
	o->soft_pin_ms = o->soft_pin_ttl_ms ? now + o->soft_pin_ttl_ms : 0;
	o->state = MST_ST_COMPLETE;
	mst_obj_insert(m, s, o);
	return 0;
}

/* Rebuild one reported object; its code. */
static int rebuild_one(struct mst_master *m, uint64_t client, const char *tenant,
		       const Lunar__ReportedObject *ro)
{
	struct mst_replica reps[MST_MAX_REPLICAS];
	struct mst_object **pp, *o;
	struct mst_shard *s;
	struct mst_okey k;
	int n, rc = mst_okey_make(&k, tenant, ro->key);

	if (rc || !ro->size)
		return rc ? rc : LUNAR_ERR_INVALID_PARAMS;
	s = &m->shards[k.hash % MST_SHARDS];
	pthread_mutex_lock(&s->lock);
	pp = mst_obj_find_key(s, &k);
	o = *pp;
	if (o && (o->version > ro->version || mst_obj_busy(o) || o->state != MST_ST_COMPLETE ||
		  (o->version == ro->version && o->size != ro->size))) {
		pthread_mutex_unlock(&s->lock);
		return LUNAR_ERR_OBJECT_ALREADY_EXISTS;
	}
	n = take_ranges(m, ro, reps);
	if (n > 0 && o && o->version == ro->version) {
		merge(m, o, reps, n);
		n = 0;
	} else if (n > 0) {
		if (o) /* an older value of the key: the report replaces it */
			mst_obj_erase(m, s, pp);
		rc = create(m, s, &k, ro, client, reps, n);
		if (rc)
			mst_replicas_free(m, reps, (unsigned)n);
		else
			lc_fetch_add_relaxed(&m->rebuild.rebuilt, 1);
		n = rc;
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* Objects x and y (indexes into rq's) by their first placement's segment
 * name, then offset. */
static int by_place(const void *x, const void *y, void *arg)
{
	const Lunar__ReportObjectsRequest *rq = arg;
	const Lunar__ReportedObject *a = rq->objects[*(const uint32_t *)x];
	const Lunar__ReportedObject *b = rq->objects[*(const uint32_t *)y];
	const Lunar__Placement *pa = a->n_placements ? a->placements[0] : NULL;
	const Lunar__Placement *pb = b->n_placements ? b->placements[0] : NULL;
	int c;

	if (!pa || !pb)
		return !!pa - !!pb;
	c = strcmp(pa->segment ? pa->segment : "", pb->segment ? pb->segment : "");
	if (c)
		return c;
	return pa->offset < pb->offset ? -1 : pa->offset > pb->offset;
}

/* The indexes of rq's objects in address order, so that taking their ranges
 * walks each segment's allocator forward from its last stop (in the order a
 * proxy's index holds them, each take could walk the whole segment: a
 * rebuild quadratic in the objects). NULL on ENOMEM: the report's order. */
static uint32_t *sorted(const Lunar__ReportObjectsRequest *rq)
{
	uint32_t *v = malloc((rq->n_objects + 1) * sizeof(*v));

	if (!v)
		return NULL;
	for (size_t i = 0; i < rq->n_objects; i++) /* n_objects <= REPORT_MAX */
		v[i] = (uint32_t)i;
	qsort_r(v, rq->n_objects, sizeof(*v), by_place, (void *)rq);
	return v;
}

void mst_rebuild_heard(struct mst_master *m)
{
	LC_WRITE_ONCE(m->rebuild.heard_ms, lc_now_ms());
}

void mst_rebuild_lead(struct mst_master *m, uint64_t now_ms)
{
	LC_WRITE_ONCE(m->rebuild.proxies_done, 0);
	LC_WRITE_ONCE(m->rebuild.clients_called, 0);
	LC_WRITE_ONCE(m->rebuild.clients_done, 0);
	LC_WRITE_ONCE(m->rebuild.lead_ms, now_ms);
}

int mst_rebuild_settling(struct mst_master *m)
{
	uint64_t lead = LC_READ_ONCE(m->rebuild.lead_ms), heard, now, done, called;
	size_t n;

	if (!lead)
		return 0;
	heard = LC_READ_ONCE(m->rebuild.heard_ms);
	if (heard < lead) /* one heard in an older term */
		heard = lead;
	now = lc_now_ms();
	if (now - lead >= m->cfg.report_wait_ms || now - heard >= MST_REBUILD_GRACE_MS)
		return 0;
	n = LC_READ_ONCE(m->segs.n); /* once: an unmount may come between two reads */
	/* done first (acquired: mst_client_last_batch): a client is done only
	 * once it called, so the two, read so, held together at the first */
	done = lc_load_acquire(&m->rebuild.clients_done);
	called = LC_READ_ONCE(m->rebuild.clients_called);
	return now - lead < 300 || !n || LC_READ_ONCE(m->rebuild.proxies_done) < n || done < called;
}

int mst_rebuild_report(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__ReportObjectsRequest *rq = (const void *)req;
	Lunar__ReportObjectsReply *r =
	    (void *)lp_reply_new(&lunar__report_objects_reply__descriptor, 0, mst_view(m));
	uint64_t now = lc_now_ms(), zero = 0;
	uint32_t *order;
	unsigned owned;
	int rebuilt = 0;

	if (!r)
		return -ENOMEM;
	*rep = &r->base;
	if (rq->n_objects > REPORT_MAX ||
	    !(r->codes = calloc(rq->n_objects + 1, sizeof(int32_t)))) {
		lp_status(&r->base)->code = LUNAR_ERR_INVALID_PARAMS;
		return 0;
	}
	lc_cas(&m->rebuild.first_ms, &zero, now); /* the first report's time, once */
	order = sorted(rq);
	for (size_t j = 0; j < rq->n_objects; j++) {
		size_t i = order ? order[j] : j; /* codes follow the request's order */
		const Lunar__ReportedObject *ro = rq->objects[i];

		r->codes[i] = rebuild_one(m, rq->client_id, mst_tenant_name(ro->tenant), ro);
		if (r->codes[i])
			lc_fetch_add_relaxed(&m->rebuild.refused, 1);
		else
			rebuilt = 1;
	}
	free(order);
	r->n_codes = rq->n_objects;
	lc_fetch_add_relaxed(&m->rebuild.reported, rq->n_objects);
	LC_WRITE_ONCE(m->rebuild.last_ms, lc_now_ms());
	if (rebuilt) /* not a report sent again, whose ranges are all taken */
		mst_rebuild_heard(m);
	/* Once a lead for each client, and for each segment owner for each of
	 * its segments: the wait compares the counts with the clients that
	 * called and the segments mounted. */
	owned = rq->last ? mst_segments_owned(m, rq->client_id) : 0;
	if (rq->last &&
	    mst_client_last_batch(m, rq->client_id, LC_READ_ONCE(m->rebuild.lead_ms), owned != 0))
		lc_fetch_add_relaxed(&m->rebuild.proxies_done, owned);
	return 0;
}

void mst_rebuild_metrics(struct mst_master *m, FILE *f)
{
	const struct mst_rebuild_ctr *c = &m->rebuild;
	uint64_t first = LC_READ_ONCE(c->first_ms);
	uint64_t last = LC_READ_ONCE(c->last_ms);

	fprintf(f,
		"# TYPE lunar_master_rebuild_reported_total counter\n"
		"lunar_master_rebuild_reported_total %llu\n"
		"# TYPE lunar_master_rebuild_objects_total counter\n"
		"lunar_master_rebuild_objects_total %llu\n"
		"# TYPE lunar_master_rebuild_merged_total counter\n"
		"lunar_master_rebuild_merged_total %llu\n"
		"# TYPE lunar_master_rebuild_refused_total counter\n"
		"lunar_master_rebuild_refused_total %llu\n"
		"# TYPE lunar_master_rebuild_proxies_done gauge\n"
		"lunar_master_rebuild_proxies_done %llu\n"
		"# TYPE lunar_master_rebuild_clients_called gauge\n"
		"lunar_master_rebuild_clients_called %llu\n"
		"# TYPE lunar_master_rebuild_clients_done gauge\n"
		"lunar_master_rebuild_clients_done %llu\n"
		"# TYPE lunar_master_rebuild_seconds gauge\n"
		"lunar_master_rebuild_seconds %.3f\n",
		(unsigned long long)LC_READ_ONCE(c->reported),
		(unsigned long long)LC_READ_ONCE(c->rebuilt),
		(unsigned long long)LC_READ_ONCE(c->merged),
		(unsigned long long)LC_READ_ONCE(c->refused),
		(unsigned long long)LC_READ_ONCE(c->proxies_done),
		(unsigned long long)LC_READ_ONCE(c->clients_called),
		(unsigned long long)LC_READ_ONCE(c->clients_done),
		first ? (double)(last - first) / 1000.0 : 0.0);
}
