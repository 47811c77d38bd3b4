/*
 * objidx.c - what this proxy committed, for a new leader after a failover
 * (SPEC §14, docs/architecture.md "No cache lost on failover"): every put
 * this proxy committed, with the placement of each replica (in our segment
 * or a peer's), kept until this proxy removes the key or puts it again.
 * After a re-mount in a newer view, px_objidx_report sends it all to the
 * leader in batches (ReportObjects). Only with --master etcd://...; a
 * fixed bucket array (never rehashed) so a report walks it in one pass while
 * puts go on.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "px_int.h"

#define BUCKETS	     (1u << 18)
#define BATCH	     4096 /* objects per ReportObjects */
#define REPORT_TRIES 20	  /* beats a report with unmounted segments is sent again */

struct place {
	const char *seg;
	uint64_t off, len;
};

struct entry {
	struct entry *next;
	uint64_t hash, size, version, soft_ttl;
	uint32_t crc;
	uint8_t hard_pin;
	unsigned nplace;
	const char *tenant, *key;
	struct place place[];
};

struct px_objidx {
	pthread_mutex_t lock;
	struct entry **tab;
	uint64_t n;
	unsigned tries; /* of the current view's report; under lock */
};

static uint64_t hash_of(const char *tenant, const char *key)
{
	uint64_t h = 1469598103934665603ull;

	for (const char *p = tenant; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	h = (h ^ 0xff) * 1099511628211ull;
	for (const char *p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

struct px_objidx *px_objidx_create(void)
{
	struct px_objidx *x = calloc(1, sizeof(*x));

	if (!x || !(x->tab = calloc(BUCKETS, sizeof(*x->tab)))) {
		free(x);
		return NULL;
	}
	pthread_mutex_init(&x->lock, NULL);
	return x;
}

void px_objidx_destroy(struct px_objidx *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < BUCKETS; i++)
		for (struct entry *e = x->tab[i], *n; e; e = n) {
			n = e->next;
			free(e);
		}
	pthread_mutex_destroy(&x->lock);
	free(x->tab);
	free(x);
}

/* Unlink (tenant, key) from its chain; the entry or NULL. Lock held. */
static struct entry *unlink_key(struct px_objidx *x, uint64_t h, const char *tenant,
				const char *key)
{
	for (struct entry **pp = &x->tab[h % BUCKETS], *e; (e = *pp); pp = &e->next)
		if (e->hash == h && !strcmp(e->key, key) && !strcmp(e->tenant, tenant)) {
			*pp = e->next;
			x->n--;
			return e;
		}
	return NULL;
}

/* One allocation: the entry, its places, then tenant, key, segment names. */
static struct entry *entry_new(const char *tenant, const char *key, Lunar__Replica *const *reps,
			       size_t n)
{
	size_t tl = strlen(tenant) + 1, kl = strlen(key) + 1, sz = tl + kl, np = 0;
	struct entry *e;
	char *p;

	for (size_t i = 0; i < n; i++)
		if (reps[i]->type == LUNAR__REPLICA_TYPE__MEMORY && reps[i]->segment)
			sz += strlen(reps[i]->segment) + 1, np++;
	if (!np || !(e = malloc(sizeof(*e) + np * sizeof(struct place) + sz)))
		return NULL;
	p = (char *)&e->place[np];
	e->tenant = memcpy(p, tenant, tl);
	e->key = memcpy(p + tl, key, kl);
	p += tl + kl;
	e->nplace = 0;
	for (size_t i = 0; i < n; i++) {
		const Lunar__Replica *r = reps[i];

		if (r->type != LUNAR__REPLICA_TYPE__MEMORY || !r->segment)
			continue;
		e->place[e->nplace++] = (struct place){
		    memcpy(p, r->segment, strlen(r->segment) + 1), r->offset, r->length};
		p += strlen(r->segment) + 1;
	}
	return e;
}

void px_objidx_put(struct px_objidx *x, const char *tenant, const char *key,
		   const struct px_objidx_val *v, Lunar__Replica *const *reps, size_t n)
{
	uint64_t h = hash_of(tenant, key);
	struct entry *e = entry_new(tenant, key, reps, n), *old;

	if (!e)
		return; /* no memory (or no DRAM replica): a miss after a failover */
	e->hash = h;
	e->size = v->size;
	e->crc = v->crc;
	e->version = n ? reps[0]->version : 0;
	e->hard_pin = (uint8_t)v->hard_pin;
	e->soft_ttl = v->soft_pin_ttl_ms;
	pthread_mutex_lock(&x->lock);
	old = unlink_key(x, h, tenant, key);
	e->next = x->tab[h % BUCKETS];
	x->tab[h % BUCKETS] = e;
	x->n++;
	pthread_mutex_unlock(&x->lock);
	free(old);
}

void px_objidx_remove(struct px_objidx *x, const char *tenant, const char *key)
{
	uint64_t h = hash_of(tenant, key);
	struct entry *e;

	pthread_mutex_lock(&x->lock);
	e = unlink_key(x, h, tenant, key);
	pthread_mutex_unlock(&x->lock);
	free(e);
}

uint64_t px_objidx_count(struct px_objidx *x)
{
	uint64_t n;

	pthread_mutex_lock(&x->lock);
	n = x->n;
	pthread_mutex_unlock(&x->lock);
	return n;
}

struct batch {
	Lunar__ReportObjectsRequest rq;
	Lunar__ReportedObject obj[BATCH], *objp[BATCH];
	Lunar__Placement pl[BATCH * 2], *plp[BATCH * 2];
	size_t npl;
	int missing;	  /* some placement's segment is not mounted yet */
	uint64_t refused; /* objects the leader could not take, but for newer values */
	int why;	  /* the first such code */
};

/* Send b's objects; codes tallied. 0 or the call's code. */
static int batch_send(struct px_proxy *px, struct batch *b, int last)
{
	const Lunar__ReportObjectsReply *r;
	ProtobufCMessage *rep;
	int rc;

	b->rq.last = last;
	rc = px_mc_call(px->mc, LUNAR__METHOD__REPORT_OBJECTS, &b->rq.base, &rep);
	if (!rc && (rc = px_mc_code(rep)) != 0)
		protobuf_c_message_free_unpacked(rep, NULL);
	if (rc)
		return rc;
	r = (const Lunar__ReportObjectsReply *)rep;
	for (size_t i = 0; i < r->n_codes; i++) {
		b->missing |= r->codes[i] == LUNAR_ERR_SEGMENT_NOT_FOUND;
		if (r->codes[i] && r->codes[i] != LUNAR_ERR_OBJECT_ALREADY_EXISTS && !b->refused++)
			b->why = r->codes[i];
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	b->rq.n_objects = 0;
	b->npl = 0;
	return 0;
}

/* Add e to b (pointers into e: the index lock stays held until sent). */
static void batch_add(struct batch *b, const struct entry *e)
{
	Lunar__ReportedObject *o = &b->obj[b->rq.n_objects];

	lunar__reported_object__init(o);
	o->tenant = (char *)e->tenant;
	o->key = (char *)e->key;
	o->size = e->size;
	o->crc32c = e->crc;
	o->version = e->version;
	o->hard_pin = e->hard_pin;
	o->soft_pin_ttl_ms = e->soft_ttl;
	o->placements = &b->plp[b->npl];
	for (unsigned i = 0; i < e->nplace && b->npl < BATCH * 2; i++) {
		Lunar__Placement *p = &b->pl[b->npl];

		lunar__placement__init(p);
		p->segment = (char *)e->place[i].seg;
		p->offset = e->place[i].off;
		p->length = e->place[i].len;
		b->plp[b->npl++] = p;
		o->n_placements++;
	}
	b->objp[b->rq.n_objects++] = o;
}

/* Entries by their first placement's segment, then offset. */
static int by_place(const void *x, const void *y)
{
	const struct entry *a = *(const struct entry *const *)x;
	const struct entry *b = *(const struct entry *const *)y;
	int c;

	if (!a->nplace || !b->nplace)
		return !!a->nplace - !!b->nplace;
	c = strcmp(a->place[0].seg, b->place[0].seg);
	if (c)
		return c;
	return a->place[0].off < b->place[0].off ? -1 : a->place[0].off > b->place[0].off;
}

/*
 * The index's entries in address order (x locked), or NULL (ENOMEM; then
 * bucket order). The leader takes each reported range in its segment's
 * allocator walking from its last stop: in address order the whole report
 * walks each segment once; in hash order each batch could walk it all (1M
 * objects: 13 s instead of well under one).
 */
static const struct entry **sorted(struct px_objidx *x, size_t *n)
{
	const struct entry **v = malloc((x->n + 1) * sizeof(*v));

	*n = 0;
	if (!v)
		return NULL;
	for (size_t i = 0; i < BUCKETS; i++)
		for (const struct entry *e = x->tab[i]; e && *n < x->n; e = e->next)
			v[(*n)++] = e;
	qsort(v, *n, sizeof(*v), by_place);
	return v;
}

/* Add e to b, sending b first when full; 0 or batch_send's code. */
static int batch_put(struct px_proxy *px, struct batch *b, const struct entry *e)
{
	int rc = 0;

	if (b->rq.n_objects == BATCH || b->npl + e->nplace > BATCH * 2)
		rc = batch_send(px, b, 0);
	if (!rc)
		batch_add(b, e);
	return rc;
}

/* Send every entry of x (locked) but the last batch, in address order
 * (bucket order without memory for the sort): the objects added, *rc. */
static uint64_t report_all(struct px_proxy *px, struct px_objidx *x, struct batch *b, int *rc)
{
	size_t n = 0;
	const struct entry **v = sorted(x, &n);
	uint64_t sent = 0;

	for (size_t i = 0; v && i < n && !*rc; i++, sent++)
		*rc = batch_put(px, b, v[i]);
	for (size_t i = 0; !v && i < BUCKETS && !*rc; i++)
		for (const struct entry *e = x->tab[i]; e && !*rc; e = e->next, sent++)
			*rc = batch_put(px, b, e);
	free(v);
	return sent;
}

int px_objidx_report(struct px_proxy *px, int *again)
{
	struct px_objidx *x = px->objidx;
	struct batch *b = calloc(1, sizeof(*b));
	uint64_t n = 0, t0 = lc_now_ms();
	int rc = 0;

	if (!b)
		return LUNAR_ERR_INTERNAL;
	lunar__report_objects_request__init(&b->rq);
	b->rq.client_id = px->client_id;
	b->rq.objects = b->objp;
	/* The whole walk under the lock: puts wait to index (not to run). */
	pthread_mutex_lock(&x->lock);
	n = report_all(px, x, b, &rc);
	if (!rc)
		rc = batch_send(px, b, 0);
	/* "last" (an empty batch) only when no placement waited for a segment
	 * to be mounted: the leader starts placing once every proxy said last,
	 * and would place over the ranges this report sends again next beat. */
	if (!rc && !b->missing)
		rc = batch_send(px, b, 1);
	/* Under the lock too: the heartbeat and a client's ping (a pool
	 * thread) may both report. */
	*again = b->missing && ++x->tries < REPORT_TRIES;
	if (!*again)
		x->tries = 0;
	pthread_mutex_unlock(&x->lock);
	if (b->refused)
		LC_WARN("proxy", "the leader could not take %llu reported object(s): %s",
			(unsigned long long)b->refused, lunar_strerror(b->why));
	LC_INFO("proxy", "reported %llu object(s) to the leader in %llu ms%s%s",
		(unsigned long long)n, (unsigned long long)(lc_now_ms() - t0), rc ? ": " : "",
		rc	     ? lunar_strerror(rc)
		: b->missing ? " (some segments not "
			       "mounted yet)"
			     : "");
	free(b);
	return rc;
}
