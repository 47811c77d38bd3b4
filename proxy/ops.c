/*
 * ops.c - runs one decoded request to completion on a worker: picks the
 * executor for its operation and reports the result to the client.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "lunar.h"
#include "ops.h"

int px_batch_collect(struct px_req *r, struct px_batch *b)
{
	b->n = 0;
	b->keys = b->keys_in;
	b->idx = b->idx_in;
	if (r->count > PX_BATCH_INLINE) {
		b->keys = calloc(r->count, sizeof(*b->keys));
		b->idx = calloc(r->count, sizeof(*b->idx));
		if (!b->keys || !b->idx) {
			px_batch_fini(b);
			return -ENOMEM;
		}
	}
	for (uint32_t i = 0; i < r->count; i++) {
		if (r->items[i].result)
			continue;
		b->keys[b->n] = r->items[i].key;
		b->idx[b->n++] = i;
	}
	return 0;
}

void px_batch_fini(struct px_batch *b)
{
	if (b->keys != b->keys_in)
		free(b->keys);
	if (b->idx != b->idx_in)
		free(b->idx);
	b->keys = NULL;
	b->idx = NULL;
}

void px_batch_fail(struct px_req *r, const struct px_batch *b, int code)
{
	for (size_t i = 0; i < b->n; i++)
		r->items[b->idx[i]].result = code;
}

int px_batch_keys_call(struct px_proxy *px, const char *tenant, uint32_t method, char **keys,
		       size_t n, int late, uint64_t reader, const uint64_t *readers,
		       ProtobufCMessage **rep)
{
	Lunar__BatchKeysRequest rq = LUNAR__BATCH_KEYS_REQUEST__INIT;
	int rc;

	rq.late = late != 0;
	rq.reader = reader;
	rq.n_readers = readers ? n : 0;
	rq.readers = (uint64_t *)readers;
	rq.client_id = px->client_id;
	rq.tenant = (char *)tenant;
	rq.n_keys = n;
	rq.keys = keys;
	rc = px_mc_call(px->mc, method, &rq.base, rep);
	if (rc)
		return rc;
	rc = px_mc_code(*rep);
	if (rc) {
		protobuf_c_message_free_unpacked(*rep, NULL);
		*rep = NULL;
	}
	return rc;
}

int px_segment_ready(struct px_proxy *px)
{
	return px->cfg.segment_size == 0 || atomic_load(&px->mounted);
}

void px_index_committed(struct px_proxy *px, const struct px_req *r, const char *key,
			const struct px_item *it, const Lunar__PutStartResult *res)
{
	struct px_objidx_val v = {
	    .size = it->total,
	    .crc = it->crc,
	    .hard_pin = (r->sqe.flags & LC_SQE_HARD_PIN) != 0,
	    .soft_pin_ttl_ms = (r->sqe.flags & LC_SQE_SOFT_PIN) ? r->sqe.soft_pin_ttl_ms : 0};

	if (px->objidx && res->n_replicas)
		px_objidx_put(px->objidx, r->s->tenant, key, &v, res->replicas, res->n_replicas);
}

void px_batch_drop_leases(struct px_proxy *px, struct px_req *r, const struct px_batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		px_lease_cache_drop(px->leases, r->s->tenant, b->keys[i]);
}

int px_down_has(const struct px_down *d, const char *endpoint)
{
	if (d->n == PX_DOWN_MAX)
		return 1;
	for (unsigned i = 0; i < d->n; i++)
		if (!strcmp(d->ep[i], endpoint))
			return 1;
	return 0;
}

void px_down_add(struct px_down *d, const char *endpoint)
{
	/* The master keeps endpoints shorter; a longer one is only not remembered. */
	if (px_down_has(d, endpoint) || strlen(endpoint) >= PX_DOWN_EP)
		return;
	strcpy(d->ep[d->n++], endpoint);
}

/* Remove-all and remove-by-regex: the count removed, or a code. */
static int64_t run_remove_many(struct px_proxy *px, struct px_req *r)
{
	Lunar__RemoveAllRequest all = LUNAR__REMOVE_ALL_REQUEST__INIT;
	Lunar__RemoveByRegexRequest re = LUNAR__REMOVE_BY_REGEX_REQUEST__INIT;
	const ProtobufCMessage *rq = &all.base;
	uint32_t method = LUNAR__METHOD__REMOVE_ALL;
	ProtobufCMessage *rep;
	int64_t rc;

	all.tenant = re.tenant = r->s->tenant;
	all.force = re.force = (r->sqe.flags & LC_SQE_FORCE) != 0;
	if (r->sqe.op == LC_OP_REMOVE_REGEX) {
		re.pattern = r->pattern;
		rq = &re.base;
		method = LUNAR__METHOD__REMOVE_BY_REGEX;
	}
	px_resv_tell_landed(px);
	rc = px_mc_call(px->mc, method, rq, &rep);
	if (rc)
		return rc;
	rc = px_mc_code(rep);
	if (!rc)
		rc = ((Lunar__RemoveAllReply *)rep)->count;
	protobuf_c_message_free_unpacked(rep, NULL);
	if (rc > 0)
		px_lease_cache_clear(px->leases, r->s->tenant);
	return rc;
}

/* Figures of a finished request: failed keys, value bytes moved. */
static void px_req_count(struct px_proxy *px, const struct px_req *r)
{
	uint64_t moved = 0, failed = 0;

	for (uint32_t i = 0; i < r->count; i++) {
		const struct px_item *it = &r->items[i];

		if (it->result < 0)
			failed++;
		else if (r->sqe.op == LC_OP_GET)
			moved += (uint64_t)it->result;
		else if (r->sqe.op == LC_OP_PUT || r->sqe.op == LC_OP_UPSERT)
			moved += it->total;
	}
	PX_COUNT(px, key_errors, failed);
	if (r->sqe.op == LC_OP_GET)
		PX_COUNT(px, bytes_got, moved);
	else if (r->sqe.op == LC_OP_PUT || r->sqe.op == LC_OP_UPSERT)
		PX_COUNT(px, bytes_put, moved);
}

/* Largest value bytes a request may move and still run on the loop: a 4 MiB
 * copy holds other clients back ~0.2 ms, less than a hand-off to a worker
 * and back costs a 1 MiB request. */
#define PX_INLINE_BYTES (4u * 1024 * 1024)

int px_req_inline(const struct px_proxy *px, const struct px_req *r)
{
	uint64_t bytes = 0;

	if (!px->master || px->cfg.debug_put_delay_ms || px->cfg.debug_get_delay_ms)
		return 0;
	switch (r->sqe.op) {
	case LC_OP_GET:
		if (px->disk)
			return 0; /* may read an SSD copy */
				  /* fall through */
	case LC_OP_PUT:
	case LC_OP_UPSERT:
		for (uint32_t i = 0; i < r->count; i++)
			bytes += r->items[i].total;
		if (bytes > PX_INLINE_BYTES)
			return 0;
		/* a put that cannot fit waits for an eviction round */
		return r->sqe.op == LC_OP_GET || !mst_put_may_wait(px->master, bytes);
	case LC_OP_HEALTH: return 1;
	case LC_OP_REMOVE_ALL:
	case LC_OP_REMOVE_REGEX: return 0; /* visits every object: never on the loop */
	default: return r->count <= 64;
	}
}

void px_debug_hold(const struct px_session *s, uint64_t ms)
{
	uint64_t end = lc_now_ms() + ms;
	struct timespec ts = {0, 50 * 1000 * 1000};

	while (lc_now_ms() < end && !atomic_load(&s->dead))
		nanosleep(&ts, NULL);
}

/* Take r out of its session's in-flight counts (admission, loop.c). */
static void req_uncount(struct px_req *r)
{
	atomic_fetch_sub(&r->s->inflight, 1);
	atomic_fetch_sub(&r->s->inflight_items, r->count);
}

void px_req_run(struct px_proxy *px, struct px_req *r)
{
	struct px_session *s = r->s;
	int64_t result;

	/* A client that gave up (or was cut off) waits for its session to
	 * close, and then uses its memory for other things: a request it left
	 * queued must not touch that memory any more, nor keep it waiting. */
	if (atomic_load(&s->dead)) {
		px_req_drop(r);
		return;
	}
	switch (r->sqe.op) {
	case LC_OP_PUT:
	case LC_OP_UPSERT: result = px_run_put(px, r); break;
	case LC_OP_GET:
	case LC_OP_GET_SIZE:
	case LC_OP_EXISTS:
	case LC_OP_PREFIX_MATCH: result = px_run_get(px, r); break;
	case LC_OP_REMOVE: result = px_run_remove(px, r); break;
	case LC_OP_HEALTH: result = px_master_ping(px) || !px_segment_ready(px) ? 2 : 0; break;
	default: result = run_remove_many(px, r); break;
	}
	px_req_count(px, r);
	/* Out of the client's in-flight counts before DONE: the request its
	 * thread sends as it wakes must find the room this one leaves. */
	req_uncount(r);
	if (!atomic_load(&s->dead))
		px_complete(&s->rg, r, result);
	px_session_put(s);
	px_req_free(r);
}

void px_req_drop(struct px_req *r)
{
	struct px_session *s = r->s;

	req_uncount(r);
	px_session_put(s);
	px_req_free(r);
}
