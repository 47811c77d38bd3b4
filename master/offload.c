/*
 * offload.c - the offload queues: per proxy with an SSD tier, the objects it
 * should copy from its DRAM segment to its disk. Tasks are queued at commit
 * (--offload on_put) or by eviction (on_evict), handed out by Ping (up to
 * MST_OFFLOAD_BATCH at a time, then in flight), and end when the proxy
 * reports the copy (OffloadDone) or its failure (DiskReplicasRemove). A task
 * in flight too long goes back to the queue. Beside the tasks, each queue
 * holds forget records: disk copies of objects removed or replaced, which
 * the next Ping tells the proxy to delete. One lock, a leaf.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "mst_int.h"
#include "mst_obj.h"

struct mst_task {
	struct mst_task *next;
	uint64_t sent_ms; /* 0 while queued */
	uint64_t size;
	uint32_t crc;
	uint64_t off, len; /* the source MEMORY replica */
	char *segment, *endpoint;
	uint64_t version;	/* the object's, for the source's capability */
	uint8_t landing;	/* committed beside its write: may not have landed */
	uint64_t cap_ttl_ms;	/* keyed: the capability's life from handing out; 0 keyless */
	struct auth_key secret; /* keyed: the source segment's */
	uint64_t mount;		/* the source segment's (Replica.mount) */
	size_t klen, tlen;	/* kbuf: tenant "\0" key */
	char kbuf[];
};

/* A disk record its owner should delete. */
struct mst_forget {
	struct mst_forget *next;
	uint64_t location;
	size_t klen, tlen; /* kbuf: tenant "\0" key */
	char kbuf[];
};

struct mst_oqueue {
	struct mst_oqueue *next;
	uint64_t client;
	struct mst_task *queued, **tail;    /* FIFO */
	struct mst_task *inflight, **itail; /* FIFO: oldest sent first */
	uint64_t n;			    /* queued + in flight */
	uint64_t bytes;			    /* their sizes */
	struct mst_forget *forget, **ftail; /* FIFO, nforget <= MST_FORGET_MAX */
	uint64_t nforget;
};

int mst_offload_init(struct mst_offload *q)
{
	int rc;

	q->head = NULL;
	q->nended = 0;
	rc = lc_cond_init(&q->ended);
	if (rc)
		return -rc;
	rc = pthread_mutex_init(&q->lock, NULL);
	if (rc)
		pthread_cond_destroy(&q->ended);
	return -rc;
}

static void task_free(struct mst_task *t)
{
	if (!t)
		return;
	free(t->segment);
	free(t->endpoint);
	auth_key_wipe(&t->secret);
	free(t);
}

static void tasks_free(struct mst_task *t)
{
	while (t) {
		struct mst_task *n = t->next;

		task_free(t);
		t = n;
	}
}

static void oqueue_free(struct mst_oqueue *q)
{
	tasks_free(q->queued);
	tasks_free(q->inflight);
	while (q->forget) {
		struct mst_forget *f = q->forget;

		q->forget = f->next;
		free(f);
	}
	free(q);
}

void mst_offload_fini(struct mst_offload *q)
{
	while (q->head) {
		struct mst_oqueue *n = q->head->next;

		oqueue_free(q->head);
		q->head = n;
	}
	pthread_cond_destroy(&q->ended);
	pthread_mutex_destroy(&q->lock);
}

/* The queue of client, or NULL. Lock held. */
static struct mst_oqueue **oqueue_find(struct mst_offload *q, uint64_t client)
{
	struct mst_oqueue **pp = &q->head;

	while (*pp && (*pp)->client != client)
		pp = &(*pp)->next;
	return pp;
}

int mst_offload_register(struct mst_master *m, uint64_t client)
{
	struct mst_oqueue **pp, *q;
	int rc = 0;

	pthread_mutex_lock(&m->offload.lock);
	pp = oqueue_find(&m->offload, client);
	if (!*pp) {
		/* Checked under the lock: a client declared dead after this finds
		 * its queue (its drop takes the lock once it left the table). */
		if (!mst_client_alive(m, client)) {
			rc = LUNAR_ERR_ILLEGAL_CLIENT;
		} else if (!(q = calloc(1, sizeof(*q)))) {
			rc = -ENOMEM;
		} else {
			q->client = client;
			q->tail = &q->queued;
			q->itail = &q->inflight;
			q->ftail = &q->forget;
			*pp = q;
		}
	}
	pthread_mutex_unlock(&m->offload.lock);
	return rc;
}

void mst_offload_drop_client(struct mst_master *m, uint64_t client)
{
	struct mst_oqueue **pp, *q;

	pthread_mutex_lock(&m->offload.lock);
	pp = oqueue_find(&m->offload, client);
	q = *pp;
	if (q)
		*pp = q->next;
	pthread_mutex_unlock(&m->offload.lock);
	if (q)
		oqueue_free(q);
}

static void enqueue(struct mst_oqueue *q, struct mst_task *t)
{
	t->next = NULL;
	t->sent_ms = 0;
	*q->tail = t;
	q->tail = &t->next;
}

/* A task copying o from its MEMORY replica r. NULL on ENOMEM. */
static struct mst_task *task_new(const struct mst_master *m, const struct mst_object *o,
				 const struct mst_replica *r)
{
	struct mst_task *t = calloc(1, sizeof(*t) + o->klen + 1);

	if (!t)
		return NULL;
	t->version = o->version;
	t->mount = r->seg->mount;
	if (m->cfg.keyed) {
		t->cap_ttl_ms = m->cfg.put_start_discard_timeout_ms;
		t->secret = r->seg->secret;
	}
	t->size = o->size;
	t->crc = o->crc;
	t->landing = o->beside_resv != 0;
	t->off = r->off;
	t->len = r->len;
	t->segment = strdup(r->seg->name);
	t->endpoint = strdup(r->seg->endpoint);
	memcpy(t->kbuf, o->kbuf, o->klen);
	t->klen = o->klen;
	t->tlen = o->tlen;
	if (!t->segment || !t->endpoint) {
		task_free(t);
		return NULL;
	}
	return t;
}

/* The bytes a proxy's queue may hold. Eviction's tasks (on_evict) keep
 * memory that a put is waiting for, so those queue at most
 * --offload-queue-bytes and a quarter of the memory: a queue deeper than
 * the disk needs to stay busy only holds memory back, and eviction queues
 * more as tasks end. A task of on_put that finds the queue full is never
 * queued (its object just has no disk copy), so those are bounded by
 * --offload-queue alone. */
static uint64_t queue_bytes(struct mst_master *m, int evict)
{
	uint64_t quarter = LC_READ_ONCE(m->capacity) / 4;

	if (!evict)
		return UINT64_MAX;
	return quarter && quarter < m->cfg.offload_queue_bytes ? quarter
							       : m->cfg.offload_queue_bytes;
}

/* Queue t on the queue of one of o's replica owners; the code as mst_offload_queue. */
static int queue_locked(struct mst_master *m, struct mst_object *o, int evict, uint64_t *client)
{
	int rc = -ENOENT;

	for (unsigned i = 0; i < o->nrep; i++) {
		struct mst_oqueue *q = *oqueue_find(&m->offload, o->reps[i].seg->owner);
		struct mst_task *t;

		if (!q)
			continue;
		if (q->n && (q->n >= m->cfg.offload_queue || q->bytes >= queue_bytes(m, evict) ||
			     o->size > queue_bytes(m, evict) - q->bytes)) {
			rc = -ENOSPC;
			continue;
		}
		t = task_new(m, o, &o->reps[i]);
		if (!t)
			return -ENOMEM;
		enqueue(q, t);
		q->n++;
		q->bytes += t->size;
		*client = q->client;
		return 0;
	}
	return rc;
}

int mst_offload_queue(struct mst_master *m, struct mst_object *o, int evict)
{
	uint64_t client = 0;
	int rc;

	pthread_mutex_lock(&m->offload.lock);
	rc = queue_locked(m, o, evict, &client);
	pthread_mutex_unlock(&m->offload.lock);
	if (rc) {
		if (rc == -ENOSPC)
			lc_fetch_add_relaxed(&m->ctr.offload_skipped, 1);
		return rc;
	}
	o->offload_to = client;
	o->offload_evict = (uint8_t)evict;
	lc_fetch_add_relaxed(&m->ctr.offload_queued, 1);
	return 0;
}

void mst_offload_on_commit(struct mst_master *m, struct mst_object *o)
{
	if (m->cfg.enable_offload && m->cfg.offload == MST_OFFLOAD_ON_PUT && !o->offload_to)
		mst_offload_queue(m, o, 0);
}

static int task_is(const struct mst_task *t, const struct mst_okey *k)
{
	return t->klen == k->len && !memcmp(t->kbuf, k->buf, k->len);
}

/* Unlink and free the task for k from the FIFO at pp whose tail pointer is
 * *tail; its size, or 0 if not found. Tasks end about in the order they
 * were sent, so the one sought is near the head. */
static uint64_t list_remove(struct mst_task **pp, struct mst_task ***tail, const struct mst_okey *k)
{
	for (; *pp; pp = &(*pp)->next) {
		struct mst_task *t = *pp;

		if (task_is(t, k)) {
			uint64_t size = t->size ? t->size : 1;

			*pp = t->next;
			if (!t->next)
				*tail = pp;
			task_free(t);
			return size;
		}
	}
	return 0;
}

void mst_offload_end(struct mst_master *m, uint64_t client, const struct mst_okey *k)
{
	struct mst_oqueue *q;
	uint64_t size;

	pthread_mutex_lock(&m->offload.lock);
	q = *oqueue_find(&m->offload, client);
	size = q ? list_remove(&q->inflight, &q->itail, k) : 0;
	if (q && !size)
		size = list_remove(&q->queued, &q->tail, k);
	if (size) {
		q->n--;
		q->bytes -= size <= q->bytes ? size : q->bytes;
	}
	if (q && size) {
		m->offload.nended++;
		pthread_cond_broadcast(&m->offload.ended);
	}
	pthread_mutex_unlock(&m->offload.lock);
}

static int any_pending(const struct mst_offload *o)
{
	for (const struct mst_oqueue *q = o->head; q; q = q->next)
		if (q->n)
			return 1;
	return 0;
}

int mst_offload_wait(struct mst_master *m, uint64_t ms)
{
	struct mst_offload *o = &m->offload;
	struct timespec ts;
	uint64_t seen, ns;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ns = (uint64_t)ts.tv_nsec + ms * 1000000ull;
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	pthread_mutex_lock(&o->lock);
	seen = o->nended;
	while (o->nended == seen && any_pending(o) && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&o->ended, &o->lock, &ts);
	rc = o->nended != seen;
	pthread_mutex_unlock(&o->lock);
	return rc;
}

/* Tasks in flight since before deadline go back to the queue (the oldest
 * sent are first in flight). */
static void requeue_stale(struct mst_master *m, struct mst_oqueue *q, uint64_t deadline)
{
	while (q->inflight && q->inflight->sent_ms < deadline) {
		struct mst_task *t = q->inflight;

		q->inflight = t->next;
		enqueue(q, t);
		lc_fetch_add_relaxed(&m->ctr.offload_requeued, 1);
	}
	if (!q->inflight)
		q->itail = &q->inflight;
}

static Lunar__OffloadTask *task_pb(const struct mst_task *t)
{
	Lunar__OffloadTask *p = malloc(sizeof(*p));
	Lunar__Replica *r = malloc(sizeof(*r));

	if (!p || !r) {
		free(p);
		free(r);
		return NULL;
	}
	lunar__offload_task__init(p);
	lunar__replica__init(r);
	p->source = r;
	p->size = t->size;
	p->crc32c = t->crc;
	p->landing = t->landing;
	p->tenant = strdup(t->kbuf);
	p->key = strdup(t->kbuf + t->tlen);
	r->type = LUNAR__REPLICA_TYPE__MEMORY;
	r->state = LUNAR__REPLICA_STATE__COMPLETE;
	r->offset = t->off;
	r->length = t->len;
	r->mount = t->mount;
	r->segment = strdup(t->segment);
	r->endpoint = strdup(t->endpoint);
	if (!p->tenant || !p->key || !r->segment || !r->endpoint ||
	    (t->cap_ttl_ms && mst_cap_one(r, &t->secret, MST_CAP_READ, NULL, 0, t->version,
					  mst_cap_clock_ms() + t->cap_ttl_ms))) {
		protobuf_c_message_free_unpacked(&p->base, NULL);
		return NULL;
	}
	return p;
}

/* Move up to MST_OFFLOAD_BATCH queued tasks in flight, copied into v. */
static int take_locked(struct mst_oqueue *q, uint64_t now, Lunar__OffloadTask **v, size_t *n)
{
	while (q->queued && *n < MST_OFFLOAD_BATCH) {
		struct mst_task *t = q->queued;

		v[*n] = task_pb(t);
		if (!v[*n])
			return -ENOMEM;
		(*n)++;
		q->queued = t->next;
		t->sent_ms = now ? now : 1;
		t->next = NULL;
		*q->itail = t;
		q->itail = &t->next;
	}
	if (!q->queued)
		q->tail = &q->queued;
	return 0;
}

int mst_offload_take(struct mst_master *m, uint64_t client, uint64_t now, Lunar__OffloadTask ***out,
		     size_t *n)
{
	Lunar__OffloadTask **v = NULL;
	struct mst_oqueue *q;
	int rc = 0;

	*n = 0;
	pthread_mutex_lock(&m->offload.lock);
	q = *oqueue_find(&m->offload, client);
	if (q) {
		if (now > MST_OFFLOAD_TIMEOUT_MS)
			requeue_stale(m, q, now - MST_OFFLOAD_TIMEOUT_MS);
		if (q->queued && !(v = calloc(MST_OFFLOAD_BATCH, sizeof(*v))))
			rc = -ENOMEM;
		if (v)
			rc = take_locked(q, now, v, n);
	}
	pthread_mutex_unlock(&m->offload.lock);
	*out = v;
	return rc;
}

/* Queue a forget of o's record at location on q, the oldest going when
 * full. 0 or -ENOMEM. Lock held. */
static int forget_push(struct mst_master *m, struct mst_oqueue *q, const struct mst_object *o,
		       uint64_t location)
{
	struct mst_forget *f = malloc(sizeof(*f) + o->klen + 1);

	if (!f)
		return -ENOMEM;
	f->next = NULL;
	f->location = location;
	f->klen = o->klen;
	f->tlen = o->tlen;
	memcpy(f->kbuf, o->kbuf, o->klen);
	f->kbuf[o->klen] = '\0';
	if (q->nforget >= MST_FORGET_MAX) {
		struct mst_forget *old = q->forget;

		q->forget = old->next;
		if (!q->forget)
			q->ftail = &q->forget;
		q->nforget--;
		free(old);
		lc_fetch_add_relaxed(&m->ctr.forget_dropped, 1);
	}
	*q->ftail = f;
	q->ftail = &f->next;
	q->nforget++;
	return 0;
}

void mst_offload_forget(struct mst_master *m, const struct mst_object *o)
{
	unsigned lost = 0;

	if (!o->ndisk)
		return;
	pthread_mutex_lock(&m->offload.lock);
	for (unsigned i = 0; i < o->ndisk; i++) {
		struct mst_oqueue *q = *oqueue_find(&m->offload, o->disk[i].owner);

		if (!q)
			continue; /* not a proxy we know a disk tier of any more */
		if (forget_push(m, q, o, o->disk[i].location))
			lost++;
		else
			lc_fetch_add_relaxed(&m->ctr.forget_queued, 1);
	}
	pthread_mutex_unlock(&m->offload.lock);
	if (lost)
		LC_WARN("master", "no memory to tell %u proxies to delete their copy of %s", lost,
			mst_obj_key(o));
}

static Lunar__DiskRecord *forget_pb(const struct mst_forget *f)
{
	Lunar__DiskRecord *p = malloc(sizeof(*p));

	if (!p)
		return NULL;
	lunar__disk_record__init(p);
	p->location = f->location;
	p->tenant = strdup(f->kbuf);
	p->key = strdup(f->kbuf + f->tlen);
	if (!p->tenant || !p->key) {
		protobuf_c_message_free_unpacked(&p->base, NULL);
		return NULL;
	}
	return p;
}

int mst_offload_forgets_take(struct mst_master *m, uint64_t client, Lunar__DiskRecord ***out,
			     size_t *n)
{
	Lunar__DiskRecord **v = NULL;
	struct mst_oqueue *q;
	int rc = 0;

	*n = 0;
	pthread_mutex_lock(&m->offload.lock);
	q = *oqueue_find(&m->offload, client);
	if (q && q->forget && !(v = calloc(MST_FORGET_BATCH, sizeof(*v))))
		rc = -ENOMEM;
	while (v && q->forget && *n < MST_FORGET_BATCH) {
		struct mst_forget *f = q->forget;

		v[*n] = forget_pb(f);
		if (!v[*n]) {
			rc = -ENOMEM;
			break;
		}
		(*n)++;
		q->forget = f->next;
		q->nforget--;
		free(f);
	}
	if (q && !q->forget)
		q->ftail = &q->forget;
	if (!rc && q && q->forget)
		rc = 1;
	pthread_mutex_unlock(&m->offload.lock);
	*out = v;
	return rc;
}

uint64_t mst_offload_depth(struct mst_master *m)
{
	uint64_t n = 0;

	pthread_mutex_lock(&m->offload.lock);
	for (struct mst_oqueue *q = m->offload.head; q; q = q->next)
		n += q->n;
	pthread_mutex_unlock(&m->offload.lock);
	return n;
}
