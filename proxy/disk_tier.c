/*
 * disk_tier.c - the proxy's SSD tier (disk/): opened at start (the scan
 * verifies every record), re-registered with the master after each
 * (re)mount, fed by offload tasks from Ping replies through one worker
 * thread (the heartbeat never waits on disk), and kept consistent with the
 * master: a bucket goes only after the master dropped its replicas, a
 * record found bad on read is reported, and a record of an object removed
 * or replaced is deleted when a Ping says so (through the same worker).
 * Reads are in disk_read.c.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "atomic.h"
#include "clock.h"
#include "crc32c.h"
#include "disk/disk.h"
#include "log.h"
#include "lunar.h"
#include "disk_int.h"

#define OFFLOAD_BATCH 256 /* tasks per worker round, as many as a Ping brings */

/* One offload task or forget record, copied out of the Ping reply. */
struct px_otask {
	struct px_otask *next;
	uint64_t size, off, len;
	uint64_t location; /* a forget: the record to delete */
	bool forget;
	bool landing; /* its bytes may land after the task came (OffloadTask) */
	uint32_t crc;
	char *key;   /* after tenant in name[] */
	char name[]; /* tenant "\0" key "\0" endpoint "\0" */
};

int px_disk_records_call(struct px_proxy *px, uint32_t method, const struct dsk_record *recs,
			 size_t n, int *codes)
{
	Lunar__DiskRecordsRequest rq = LUNAR__DISK_RECORDS_REQUEST__INIT;
	Lunar__DiskRecord *v = calloc(n ? n : 1, sizeof(*v));
	Lunar__DiskRecord **pv = calloc(n ? n : 1, sizeof(*pv));
	int rc = v && pv ? 0 : LUNAR_ERR_INTERNAL;

	for (size_t i = 0; !rc && i < n; i++) {
		lunar__disk_record__init(&v[i]);
		v[i].tenant = (char *)recs[i].tenant;
		v[i].key = (char *)recs[i].key;
		v[i].size = recs[i].length;
		v[i].crc32c = recs[i].crc32c;
		v[i].location = recs[i].location;
		pv[i] = &v[i];
	}
	rq.client_id = px->client_id;
	for (size_t at = 0; !rc && (at < n || (!n && !at)); at += LUNAR_BATCH_MAX) {
		const Lunar__BatchCodesReply *r;
		ProtobufCMessage *rep;

		rq.records = pv + at;
		rq.n_records = n - at < LUNAR_BATCH_MAX ? n - at : LUNAR_BATCH_MAX;
		rc = px_mc_call(px->mc, method, &rq.base, &rep);
		if (rc)
			break;
		rc = px_mc_code(rep);
		r = (const void *)rep;
		for (size_t i = 0; !rc && codes && i < rq.n_records; i++)
			codes[at + i] = i < r->n_codes ? r->codes[i] : LUNAR_ERR_PROTOCOL;
		protobuf_c_message_free_unpacked(rep, NULL);
		if (!n)
			break;
	}
	free(v);
	free(pv);
	return rc;
}

/* The store's eviction callback: the master drops the replicas first. */
static int on_evict(void *arg, const struct dsk_record *recs, size_t n)
{
	struct px_proxy *px = arg;
	int rc = px_disk_records_call(px, LUNAR__METHOD__DISK_REPLICAS_REMOVE, recs, n, NULL);

	if (rc)
		LC_WARN("proxy", "disk eviction: master not told (%s), bucket kept",
			lunar_strerror(rc));
	return rc;
}

/* DSK_CLOCK moved records read since written to a newer bucket: the
 * master learns their new locations as it learns an offload's (the object
 * must still be that value); a copy it refuses goes. */
static void on_moved(void *arg, const struct dsk_record *recs, size_t n)
{
	struct px_proxy *px = arg;
	int *codes = calloc(n, sizeof(*codes));
	int rc = codes ? px_disk_records_call(px, LUNAR__METHOD__OFFLOAD_DONE, recs, n, codes)
		       : LUNAR_ERR_INTERNAL;

	for (size_t i = 0; i < n; i++)
		if (rc || codes[i])
			dsk_remove(px->disk->store, recs[i].tenant, recs[i].key);
	free(codes);
}

/* --- restart re-registration --- */

struct reg_list {
	struct dsk_record *v;
	size_t n, cap;
};

static int reg_collect(void *arg, const struct dsk_record *rec)
{
	struct reg_list *l = arg;
	struct dsk_record r = *rec;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct dsk_record *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	r.tenant = strdup(rec->tenant);
	r.key = strdup(rec->key);
	l->v[l->n++] = r;
	return r.tenant && r.key ? 0 : -ENOMEM;
}

static void reg_free(struct reg_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free((char *)l->v[i].tenant);
		free((char *)l->v[i].key);
	}
	free(l->v);
}

/* Records the master refused as copies of another value go. */
static void reg_drop_stale(struct px_disk *d, const struct reg_list *l, const int *codes)
{
	for (size_t i = 0; i < l->n; i++)
		if (codes[i] == LUNAR_ERR_OBJECT_ALREADY_EXISTS &&
		    !dsk_remove(d->store, l->v[i].tenant, l->v[i].key))
			atomic_fetch_add(&d->stale_removed, 1);
}

int px_disk_register(struct px_proxy *px, int again)
{
	struct px_disk *d = px->disk;
	struct reg_list l = {0};
	int *codes = NULL, rc;

	if (!d || (!again && atomic_load(&d->registered)))
		return 0;
	rc = dsk_list(d->store, reg_collect, &l) ? LUNAR_ERR_INTERNAL : 0;
	if (!rc && !(codes = calloc(l.n + 1, sizeof(*codes))))
		rc = LUNAR_ERR_INTERNAL;
	if (!rc)
		rc = px_disk_records_call(px, LUNAR__METHOD__DISK_REPLICAS_ADD, l.v, l.n, codes);
	if (!rc) {
		reg_drop_stale(d, &l, codes);
		atomic_store(&d->registered, true);
		LC_INFO("proxy", "disk tier: %zu records registered with the master", l.n);
	} else {
		LC_WARN("proxy", "disk tier: registering %zu records: %s", l.n, lunar_strerror(rc));
	}
	free(codes);
	reg_free(&l);
	return rc;
}

/* --- offload --- */

/* A zeroed task naming (tenant, key) at endpoint; NULL on ENOMEM. */
static struct px_otask *otask_new(const char *tenant, const char *key, const char *endpoint)
{
	size_t tl = strlen(tenant), kl = strlen(key), el = strlen(endpoint);
	struct px_otask *o = calloc(1, sizeof(*o) + tl + kl + el + 3);

	if (!o)
		return NULL;
	memcpy(o->name, tenant, tl + 1);
	o->key = memcpy(o->name + tl + 1, key, kl + 1);
	memcpy(o->key + kl + 1, endpoint, el + 1);
	return o;
}

static void otask_push(struct px_disk *d, struct px_otask *o)
{
	pthread_mutex_lock(&d->lock);
	*d->tail = o;
	d->tail = &o->next;
	d->depth++;
	pthread_cond_signal(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

int px_disk_busy(struct px_proxy *px)
{
	struct px_disk *d = px->disk;

	return d && lc_now_ms() - atomic_load(&d->task_ms) < px->cfg.ping_interval_ms;
}

void px_disk_offload(struct px_proxy *px, Lunar__OffloadTask *const *t, size_t n)
{
	struct px_disk *d = px->disk;

	if (d && n)
		atomic_store(&d->task_ms, lc_now_ms());

	for (size_t i = 0; d && i < n; i++) {
		const Lunar__OffloadTask *x = t[i];
		struct px_otask *o;

		if (!x->tenant || !x->key || !x->source || !x->source->endpoint)
			continue;
		o = otask_new(x->tenant, x->key, x->source->endpoint);
		if (!o)
			break; /* the master sends it again after its timeout */
		o->size = x->size;
		o->crc = x->crc32c;
		o->landing = x->landing;
		o->off = x->source->offset;
		o->len = x->source->length;
		otask_push(d, o);
	}
}

void px_disk_forget(struct px_proxy *px, Lunar__DiskRecord *const *f, size_t n)
{
	struct px_disk *d = px->disk;

	for (size_t i = 0; d && i < n; i++) {
		struct px_otask *o;

		if (!f[i]->tenant || !f[i]->key)
			continue;
		o = otask_new(f[i]->tenant, f[i]->key, "");
		if (!o) {
			LC_WARN("proxy", "disk tier: no memory to delete %zu removed records",
				n - i);
			break; /* they stay until their bucket goes */
		}
		o->forget = true;
		o->location = f[i]->location;
		otask_push(d, o);
	}
}

/* Delete the record of a forget unless (tenant, key) was written again
 * since (a newer copy lives at another location). */
static void forget_one(struct px_proxy *px, const struct px_otask *t)
{
	struct dsk_store *s = px->disk->store;
	struct dsk_record rec;

	if (dsk_lookup(s, t->name, t->key, &rec) || rec.location != t->location)
		return;
	if (!dsk_remove(s, t->name, t->key))
		atomic_fetch_add(&px->disk->stale_removed, 1);
}

/* How long the source of a value committed beside its write
 * (proxy/ops_ahead.c), which may be handed out for offload before its
 * bytes have landed, is looked at again while its CRC32C is wrong. */
#define SOURCE_LANDING_MS 1000

/*
 * The task's bytes are in our segment and still the committed value. The
 * range may be rewritten meanwhile (the object removed or replaced, its
 * space placed again): that read races by design, and the CRC tells. (Were
 * it rewritten after this check, the disk keeps the master's CRC with the
 * record, and a read of it fails its check.) A landing task's CRC32C that
 * does not match is taken again, from 1 ms apart to 50, for up to
 * SOURCE_LANDING_MS; any other fails at once (its range was reused).
 */
static int source_ok(struct px_proxy *px, const struct px_otask *t)
{
	const char *ep = t->key + strlen(t->key) + 1;
	uint64_t seg = px->cfg.segment_size, end = lc_now_ms() + SOURCE_LANDING_MS;
	unsigned ms = 1;
	uint32_t crc;

	if (!px->segment || strcmp(ep, px->endpoint) || t->len != t->size || !t->size ||
	    t->off > seg || t->len > seg - t->off)
		return 0;
	for (;;) {
		LC_UNTRACKED_BEGIN();
		crc = lc_crc32c(0, (char *)px->segment + t->off, t->len);
		LC_UNTRACKED_END();
		if (crc == t->crc || !t->landing || lc_now_ms() >= end ||
		    atomic_load(&px->stopping))
			return crc == t->crc;
		nanosleep(&(struct timespec){0, (long)ms * 1000000}, NULL);
		ms = ms < 50 ? ms * 2 : 50;
	}
}

/* A task dsk_put_batch refused as already stored: 0 when the stored copy
 * is of this value (a task sent again), else replace the older value's. */
static int offload_again(struct px_proxy *px, const struct px_otask *t, uint64_t *loc)
{
	struct dsk_store *s = px->disk->store;
	struct iovec v = {(char *)px->segment + t->off, t->len};
	struct dsk_record rec;

	if (!dsk_lookup(s, t->name, t->key, &rec) && rec.crc32c == t->crc &&
	    rec.length == t->size) {
		*loc = rec.location;
		return 0;
	}
	dsk_remove(s, t->name, t->key);
	return dsk_put(s, t->name, t->key, &v, 1, t->crc, loc);
}

/* Tasks of a batch and their disk items, side by side. */
struct obatch {
	const struct px_otask *t[OFFLOAD_BATCH];
	struct dsk_put_item v[OFFLOAD_BATCH];
	size_t n;
};

static void offload_outcome(struct px_proxy *px, const struct px_otask *t, int rc, uint64_t loc,
			    struct dsk_record *done, size_t *nd, struct dsk_record *failed,
			    size_t *nf)
{
	struct dsk_record r = {
	    .tenant = t->name, .key = t->key, .length = t->size, .crc32c = t->crc, .location = loc};

	if (rc) {
		atomic_fetch_add(&px->disk->offload_failures, 1);
		LC_DEBUG("proxy", "offload of %s failed: %s", t->key, lunar_strerror(rc));
		failed[(*nf)++] = r;
	} else {
		done[(*nd)++] = r;
	}
}

/* Run a batch: forgets as they come, then every task whose source checks
 * out in one packed dsk_put_batch; done[] and failed[] point into the
 * tasks. */
static void offload_batch(struct px_proxy *px, struct px_otask *t, struct dsk_record *done,
			  size_t *nd, struct dsk_record *failed, size_t *nf)
{
	static __thread struct obatch ob;
	uint64_t t0;

	ob.n = 0;
	for (; t; t = t->next) {
		if (t->forget) {
			forget_one(px, t);
			continue;
		}
		if (!source_ok(px, t)) {
			offload_outcome(px, t, LUNAR_ERR_CHECKSUM_MISMATCH, 0, done, nd, failed,
					nf);
			continue;
		}
		ob.t[ob.n] = t;
		ob.v[ob.n++] = (struct dsk_put_item){.tenant = t->name,
						     .key = t->key,
						     .buf = (char *)px->segment + t->off,
						     .len = t->len,
						     .crc32c = t->crc};
	}
	t0 = lc_now_ns();
	dsk_put_batch(px->disk->store, ob.v, ob.n);
	atomic_fetch_add(&px->disk->offload_write_us, (lc_now_ns() - t0) / 1000);
	for (size_t i = 0; i < ob.n; i++) {
		if (!ob.v[i].rc)
			atomic_fetch_add(&px->disk->offload_bytes, ob.v[i].len);
		struct dsk_put_item *it = &ob.v[i];

		if (it->rc == LUNAR_ERR_OBJECT_ALREADY_EXISTS)
			it->rc = offload_again(px, ob.t[i], &it->location);
		offload_outcome(px, ob.t[i], it->rc, it->location, done, nd, failed, nf);
	}
}

/* Tell the master what was written and what was not. */
static void offload_report(struct px_proxy *px, const struct dsk_record *done, size_t nd,
			   const struct dsk_record *failed, size_t nf)
{
	int codes[OFFLOAD_BATCH];

	if (nd && !px_disk_records_call(px, LUNAR__METHOD__OFFLOAD_DONE, done, nd, codes)) {
		for (size_t i = 0; i < nd; i++)
			if (codes[i]) /* the object is gone or changed: the copy is stale */
				dsk_remove(px->disk->store, done[i].tenant, done[i].key);
		atomic_fetch_add(&px->disk->offloads, nd);
	}
	if (nf)
		px_disk_records_call(px, LUNAR__METHOD__DISK_REPLICAS_REMOVE, failed, nf, NULL);
}

/* Up to OFFLOAD_BATCH queued tasks, or NULL when stopping. */
static struct px_otask *take_batch(struct px_disk *d, size_t *n, int *more)
{
	struct px_otask *head, **pp;

	pthread_mutex_lock(&d->lock);
	while (!d->head && !d->stop)
		pthread_cond_wait(&d->cond, &d->lock);
	head = d->stop ? NULL : d->head;
	for (pp = &d->head, *n = 0; head && *pp && *n < OFFLOAD_BATCH; (*n)++)
		pp = &(*pp)->next;
	if (head) {
		d->head = *pp;
		*pp = NULL;
		if (!d->head)
			d->tail = &d->head;
		d->depth -= *n;
	}
	*more = d->head != NULL;
	pthread_mutex_unlock(&d->lock);
	return head;
}

static void tasks_free(struct px_otask *t)
{
	while (t) {
		struct px_otask *n = t->next;

		free(t);
		t = n;
	}
}

static void *offload_main(void *arg)
{
	struct px_proxy *px = arg;
	struct dsk_record done[OFFLOAD_BATCH], failed[OFFLOAD_BATCH];
	struct px_otask *t;
	size_t n;
	int more;

	while ((t = take_batch(px->disk, &n, &more))) {
		size_t nd = 0, nf = 0;

		atomic_store(&px->disk->running, n);
		offload_batch(px, t, done, &nd, failed, &nf);
		offload_report(px, done, nd, failed, nf);
		atomic_store(&px->disk->running, 0);
		tasks_free(t);
		/* Work came: ask for more at once rather than a heartbeat later
		 * (an empty answer puts us back on the normal cadence). */
		if (!more)
			px_heartbeat_kick(px);
	}
	return NULL;
}

/* --- life cycle --- */

static void log_scan(const struct px_config *c, const struct dsk_scan_stats *sc,
		     struct dsk_store *s)
{
	struct dsk_stats st;

	dsk_stats(s, &st);
	LC_INFO("proxy",
		"disk tier %s: %llu bytes, %s eviction, %s%s; scan kept %llu records in %llu "
		"buckets, dropped %llu records and %llu buckets",
		c->disk_dir, (unsigned long long)c->disk_capacity,
		c->disk_policy == DSK_LRU     ? "lru"
		: c->disk_policy == DSK_CLOCK ? "clock"
					      : "fifo",
		st.uring ? "io_uring" : "sync I/O", st.direct ? ", O_DIRECT" : "",
		(unsigned long long)sc->records_ok, (unsigned long long)sc->buckets,
		(unsigned long long)sc->records_dropped, (unsigned long long)sc->buckets_dropped);
}

int px_disk_open(struct px_proxy *px)
{
	struct dsk_config dc = {.dir = px->cfg.disk_dir,
				.capacity = px->cfg.disk_capacity,
				.policy = (enum dsk_policy)px->cfg.disk_policy,
				.notify = on_evict,
				.moved = on_moved,
				.notify_arg = px};
	struct px_disk *d;
	int rc;

	if (!px->cfg.disk_dir)
		return 0;
	d = calloc(1, sizeof(*d));
	if (!d)
		return LUNAR_ERR_INTERNAL;
	d->tail = &d->head;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	rc = dsk_store_open(&dc, &d->store, &d->scan);
	if (rc) {
		LC_ERROR("proxy", "disk tier %s: %s", px->cfg.disk_dir, lunar_strerror(rc));
		goto err_free;
	}
	log_scan(&px->cfg, &d->scan, d->store);
	px->disk = d;
	if (pthread_create(&d->worker, NULL, offload_main, px)) {
		px->disk = NULL;
		dsk_store_close(d->store);
		rc = LUNAR_ERR_INTERNAL;
		goto err_free;
	}
	d->worker_started = 1;
	return 0;
err_free:
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
	return rc;
}

void px_disk_stop(struct px_proxy *px)
{
	struct px_disk *d = px->disk;

	if (!d || !d->worker_started)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	pthread_join(d->worker, NULL);
	d->worker_started = 0;
	tasks_free(d->head);
	d->head = NULL;
	d->tail = &d->head;
}

void px_disk_close(struct px_proxy *px)
{
	struct px_disk *d = px->disk;

	if (!d)
		return;
	px_disk_stop(px);
	px->disk = NULL;
	dsk_store_close(d->store);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
}
