/*
 * ops_put.c - put: BatchPutStart for every key, the bytes written to each
 * allocated replica through the engine, then BatchPutEnd for the keys whose
 * every replica was written and BatchPutRevoke for the rest. A client that
 * dies before the commit gets all its puts revoked.
 */
#include <stdlib.h>
#include <time.h>

#include "clock.h"
#include "engine/engine.h"
#include "lunar.h"
#include "proxy/ops.h"

/* Start the puts of b; results (or failure codes) land in *rep. */
static int put_start(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		     ProtobufCMessage **rep)
{
	Lunar__BatchPutStartRequest rq = LUNAR__BATCH_PUT_START_REQUEST__INIT;
	Lunar__PutStartRequest *items = calloc(b->n, sizeof(*items));
	Lunar__PutStartRequest **ptrs = calloc(b->n, sizeof(*ptrs));
	int rc = LUNAR_ERR_INTERNAL;

	if (!items || !ptrs)
		goto out;
	for (size_t i = 0; i < b->n; i++) {
		lunar__put_start_request__init(&items[i]);
		items[i].key = b->keys[i];
		items[i].size = r->items[b->idx[i]].total;
		items[i].replica_num = r->sqe.replica_num;
		items[i].hard_pin = (r->sqe.flags & LC_SQE_HARD_PIN) != 0;
		items[i].soft_pin = (r->sqe.flags & LC_SQE_SOFT_PIN) != 0;
		items[i].soft_pin_ttl_ms = r->sqe.soft_pin_ttl_ms;
		ptrs[i] = &items[i];
	}
	rq.client_id = px->client_id;
	rq.tenant = r->s->tenant;
	rq.n_items = b->n;
	rq.items = ptrs;
	rc = px_mc_call(px->mc, LUNAR__METHOD__BATCH_PUT_START, &rq.base, rep);
	if (rc)
		goto out;
	rc = px_mc_code(*rep);
	if (!rc && ((Lunar__BatchPutStartReply *)*rep)->n_results != b->n)
		rc = LUNAR_ERR_PROTOCOL;
	if (rc) {
		protobuf_c_message_free_unpacked(*rep, NULL);
		*rep = NULL;
	}
out:
	free(items);
	free(ptrs);
	return rc;
}

/* Write the item's bytes to every replica; 0 or TRANSFER_FAIL. */
static int put_write(struct px_proxy *px, const struct px_item *it, const Lunar__PutStartResult *res)
{
	if (res->n_replicas == 0)
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	for (size_t k = 0; k < res->n_replicas; k++) {
		const Lunar__Replica *rp = res->replicas[k];

		if (rp->length != it->total)
			return LUNAR_ERR_TRANSFER_FAIL;
		if (eng_xfer(px->engine, rp->endpoint, ENG_WRITE, rp->offset, it->iov, it->iovcnt))
			return LUNAR_ERR_TRANSFER_FAIL;
	}
	return 0;
}

/* Test hook (--debug-put-delay): hold the commit back, but not past death. */
static void debug_delay(struct px_proxy *px, struct px_session *s)
{
	uint64_t end = lc_now_ms() + px->cfg.debug_put_delay_ms;
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	while (lc_now_ms() < end && !atomic_load(&s->dead))
		nanosleep(&ts, NULL);
}

/* Commit (or revoke) the started keys; commit failures become results. */
static void put_finish(struct px_proxy *px, struct px_req *r, const struct px_batch *started,
		       uint32_t method)
{
	ProtobufCMessage *rep;
	const Lunar__BatchCodesReply *codes;
	int rc;

	if (!started->n)
		return;
	rc = px_batch_keys_call(px, r->s, method, started->keys, started->n, &rep);
	if (rc) {
		if (method == LUNAR__METHOD__BATCH_PUT_END)
			px_batch_fail(r, started, rc);
		return;
	}
	codes = (const Lunar__BatchCodesReply *)rep;
	if (method == LUNAR__METHOD__BATCH_PUT_END)
		for (size_t i = 0; i < started->n && i < codes->n_codes; i++)
			r->items[started->idx[i]].result = codes->codes[i];
	protobuf_c_message_free_unpacked(rep, NULL);
}

/* Split the started keys into those to commit and those to revoke. */
static void put_sort(struct px_req *r, const struct px_batch *b, const int *started,
		     struct px_batch *commit, struct px_batch *revoke)
{
	for (size_t i = 0; i < b->n; i++) {
		struct px_batch *to;

		if (!started[i])
			continue;
		to = r->items[b->idx[i]].result || atomic_load(&r->s->dead) ? revoke : commit;
		to->keys[to->n] = b->keys[i];
		to->idx[to->n++] = b->idx[i];
	}
}

static void put_transfer(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			 const Lunar__BatchPutStartReply *rep, int *started)
{
	for (size_t i = 0; i < b->n; i++) {
		struct px_item *it = &r->items[b->idx[i]];
		int code = rep->results[i]->code;

		if (code == LUNAR_ERR_OBJECT_ALREADY_EXISTS) {
			it->result = 0; /* first value kept: Mooncake semantics */
			continue;
		}
		if (code) {
			it->result = code;
			continue;
		}
		started[i] = 1;
		it->result = put_write(px, it, rep->results[i]);
	}
}

int64_t px_run_put(struct px_proxy *px, struct px_req *r)
{
	struct px_batch b, commit = { 0 }, revoke = { 0 };
	ProtobufCMessage *rep = NULL;
	int *started;
	int rc;

	for (uint32_t i = 0; i < r->count; i++)
		if (!r->items[i].result && r->items[i].total == 0)
			r->items[i].result = LUNAR_ERR_INVALID_PARAMS;
	if (px_batch_collect(r, &b))
		return LUNAR_ERR_INTERNAL;
	if (!b.n)
		goto out_batch;
	started = calloc(b.n, sizeof(*started));
	if (!started || px_batch_collect(r, &commit) || px_batch_collect(r, &revoke)) {
		px_batch_fail(r, &b, LUNAR_ERR_INTERNAL);
		goto out;
	}
	commit.n = revoke.n = 0;
	rc = put_start(px, r, &b, &rep);
	if (rc) {
		px_batch_fail(r, &b, rc);
		goto out;
	}
	put_transfer(px, r, &b, (const Lunar__BatchPutStartReply *)rep, started);
	if (px->cfg.debug_put_delay_ms)
		debug_delay(px, r->s);
	put_sort(r, &b, started, &commit, &revoke);
	put_finish(px, r, &revoke, LUNAR__METHOD__BATCH_PUT_REVOKE);
	put_finish(px, r, &commit, LUNAR__METHOD__BATCH_PUT_END);
out:
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	px_batch_fini(&commit);
	px_batch_fini(&revoke);
	free(started);
out_batch:
	px_batch_fini(&b);
	return 0;
}
