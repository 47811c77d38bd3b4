/*
 * ops_put.c - put and upsert: (Batch)PutStart for every key, the bytes
 * written to each allocated replica through the engine (the CRC32C computed
 * in the same pass), then BatchPutEnd with the checksums for the keys whose
 * every replica was written and BatchPutRevoke for the rest. A client that
 * dies before the commit gets all its puts revoked. Upsert is the same flow
 * over the Upsert calls. The writes of a request go to the engine as one
 * batch, so every replica of every key moves at once.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "engine/engine.h"
#include "failpoint.h"
#include "log.h"
#include "lunar.h"
#include "ops.h"

/* The three calls of a two-phase write. */
struct put_calls {
	uint32_t start, end, revoke;
};

static const struct put_calls put_calls = {
    LUNAR__METHOD__BATCH_PUT_START, LUNAR__METHOD__BATCH_PUT_END, LUNAR__METHOD__BATCH_PUT_REVOKE};
static const struct put_calls upsert_calls = {LUNAR__METHOD__BATCH_UPSERT_START,
					      LUNAR__METHOD__BATCH_UPSERT_END,
					      LUNAR__METHOD__BATCH_UPSERT_REVOKE};

/* Start the puts of b; results (or failure codes) land in *rep. */
static int put_start(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		     uint32_t method, ProtobufCMessage **rep, int *unanswered)
{
	Lunar__BatchPutStartRequest rq = LUNAR__BATCH_PUT_START_REQUEST__INIT;
	Lunar__PutStartRequest *items =
	    LC_FAILPOINT("proxy-put-alloc") ? NULL : calloc(b->n, sizeof(*items));
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
		items[i].n_preferred_segments = r->npref;
		items[i].preferred_segments = r->pref;
		ptrs[i] = &items[i];
	}
	rq.client_id = px->client_id;
	rq.tenant = r->s->tenant;
	rq.n_items = b->n;
	rq.items = ptrs;
	rc = px_mc_call(px->mc, method, &rq.base, rep);
	if (!rc && LC_FAILPOINT("proxy-put-start")) { /* tests: its answer lost */
		protobuf_c_message_free_unpacked(*rep, NULL);
		*rep = NULL;
		rc = LUNAR_ERR_RPC_TIMEOUT;
	}
	*unanswered = rc != 0;
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

/* How far a placed key's write went (put_transfer's started[]). */
enum { PUT_UNPLACED, PUT_PLACED, PUT_IN_FLIGHT /* a peer may still write bytes of it */ };

/* The writes of one request: one per replica of every placed key. */
struct put_writes {
	uint64_t epoch; /* our segment's mount epoch before the PutStart */
	size_t n;
	struct eng_op *ops;
	struct eng_cap *caps;
	struct eng_op ops_in[PX_BATCH_INLINE];
	struct eng_cap caps_in[PX_BATCH_INLINE];
};

/* Add the writes of item i (placed as res) to w; the item's result. */
static int put_plan(struct px_item *it, const Lunar__PutStartResult *res, size_t i,
		    struct put_writes *w)
{
	if (res->n_replicas == 0)
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	for (size_t k = 0; k < res->n_replicas; k++)
		if (res->replicas[k]->length != it->total)
			return LUNAR_ERR_TRANSFER_FAIL;
	for (size_t k = 0; k < res->n_replicas; k++) {
		const Lunar__Replica *rp = res->replicas[k];
		struct eng_op *op = &w->ops[w->n];

		*op = (struct eng_op){
		    .endpoint = rp->endpoint,
		    .dir = ENG_WRITE,
		    .off = rp->offset,
		    .iov = it->iov,
		    .iovcnt = it->iovcnt,
		    .cap = px_replica_cap(rp, &w->caps[w->n]) ? &w->caps[w->n] : NULL,
		    .epoch = w->epoch,
		    /* checksummed on the way into the first, unless liblunar did */
		    .want_crc = k == 0 && !it->crc_given,
		    .crc_known = it->crc_given,
		    .known_crc = it->crc,
		    .user = (void *)(uintptr_t)i,
		};
		w->n++;
	}
	return 0;
}

/* Fold the writes' results into their items: a key fails with any of its
 * replicas, and stays PUT_IN_FLIGHT when bytes may still land. */
static void put_results(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			const struct put_writes *w, int *started)
{
	struct px_down down = {0};

	for (size_t j = 0; j < w->n; j++) {
		const struct eng_op *op = &w->ops[j];
		size_t i = (uintptr_t)op->user;
		struct px_item *it = &r->items[b->idx[i]];
		int remote = strcmp(op->endpoint, px->endpoint) != 0;

		if (!op->result) {
			if (op->want_crc)
				it->crc = op->crc;
			continue;
		}
		it->result = LUNAR_ERR_TRANSFER_FAIL;
		if (remote && !px_down_has(&down, op->endpoint)) {
			px_down_add(&down, op->endpoint);
			LC_DEBUG("proxy", "put: a write to %s failed (%d)", op->endpoint,
				 op->result);
		}
		/* Sent in part, or queued: its bytes may still land. */
		if (remote && op->result != ENG_XFER_UNSENT)
			started[i] = PUT_IN_FLIGHT;
	}
}

/* Whether the master placed a key on no more replicas than its put asked
 * for (untrusted: each replica is a write of ours). */
static int put_sane(const Lunar__PutStartResult *res, uint32_t replica_num)
{
	return res->n_replicas <= (replica_num ? replica_num : 1);
}

/* Count the replicas of the placed keys (each write's room). */
static size_t put_count(const Lunar__BatchPutStartReply *rep, size_t n, uint32_t replica_num)
{
	size_t total = 0;

	for (size_t i = 0; i < n; i++)
		if (!rep->results[i]->code && put_sane(rep->results[i], replica_num))
			total += rep->results[i]->n_replicas;
	return total;
}

/*
 * Write the keys the master placed, every replica of every key at once
 * (the engine spreads them over its connections and I/O threads, this
 * worker running a share); a write to our own segment only while its
 * mount epoch is still epoch. Both epoch and mark (px_uncommit_mark) were
 * read before the PutStart: mark tells whether a key the master found to
 * exist may be a value of ours taken back since. Returns how many keys
 * the master placed.
 */
static size_t put_transfer(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			   const Lunar__BatchPutStartReply *rep, uint64_t epoch, uint64_t mark,
			   int *started)
{
	struct put_writes w = {.epoch = epoch, .ops = w.ops_in, .caps = w.caps_in};
	size_t n = 0, room = put_count(rep, b->n, r->sqe.replica_num);

	if (room > PX_BATCH_INLINE) {
		w.ops = calloc(room, sizeof(*w.ops));
		w.caps = calloc(room, sizeof(*w.caps));
	}
	for (size_t i = 0; i < b->n; i++) {
		struct px_item *it = &r->items[b->idx[i]];
		int code = rep->results[i]->code;

		if (code == LUNAR_ERR_OBJECT_ALREADY_EXISTS) {
			/* first value kept (Mooncake semantics), unless it is
			 * one of ours about to be taken back */
			it->result = px_uncommit_waits(px, r->s->tenant, b->keys[i], mark)
					 ? LUNAR_ERR_TRANSFER_FAIL
					 : 0;
			continue;
		}
		if (code) {
			it->result = code;
			if (rep->results[i]->largest_segment) {
				r->reason = LC_REASON_TOO_LARGE;
				r->reason_arg = rep->results[i]->largest_segment;
			}
			continue;
		}
		n++;
		started[i] = PUT_PLACED;
		if (!put_sane(rep->results[i], r->sqe.replica_num))
			it->result = LUNAR_ERR_PROTOCOL;
		else
			it->result = w.ops && w.caps ? put_plan(it, rep->results[i], i, &w)
						     : LUNAR_ERR_INTERNAL;
	}
	eng_xfer_batch(px->engine, w.ops, (int)w.n);
	put_results(px, r, b, &w, started);
	if (w.ops != w.ops_in)
		free(w.ops);
	if (w.caps != w.caps_in)
		free(w.caps);
	return n;
}

/* Commit the written keys with their checksums; failures become results.
 * 0 when the master answered key by key, else the code every key got
 * (the master may have committed none, some or all of them). */
static int put_commit(struct px_proxy *px, struct px_req *r, const struct px_batch *keys,
		      uint32_t method)
{
	Lunar__BatchPutEndRequest rq = LUNAR__BATCH_PUT_END_REQUEST__INIT;
	const Lunar__BatchCodesReply *codes;
	ProtobufCMessage *rep;
	uint32_t crcs_in[PX_BATCH_INLINE], *crcs = crcs_in;
	int rc = LUNAR_ERR_INTERNAL;

	if (!keys->n)
		return 0;
	if (keys->n > PX_BATCH_INLINE && !(crcs = calloc(keys->n, sizeof(*crcs))))
		goto fail;
	for (size_t i = 0; i < keys->n; i++)
		crcs[i] = r->items[keys->idx[i]].crc;
	rq.client_id = px->client_id;
	rq.tenant = r->s->tenant;
	rq.n_keys = keys->n;
	rq.keys = keys->keys;
	rq.n_crc32c = keys->n;
	rq.crc32c = crcs;
	/* tests: a PutEnd lost on its way, or its answer */
	rc = LC_FAILPOINT("proxy-put-end") ? LUNAR_ERR_RPC_TIMEOUT
					   : px_mc_call(px->mc, method, &rq.base, &rep);
	if (crcs != crcs_in)
		free(crcs);
	if (!rc && (rc = px_mc_code(rep)) != 0)
		protobuf_c_message_free_unpacked(rep, NULL);
	if (rc)
		goto fail;
	codes = (const Lunar__BatchCodesReply *)rep;
	for (size_t i = 0; i < keys->n; i++)
		r->items[keys->idx[i]].result =
		    i < codes->n_codes ? codes->codes[i] : LUNAR_ERR_PROTOCOL;
	protobuf_c_message_free_unpacked(rep, NULL);
	return 0;
fail:
	px_batch_fail(r, keys, rc);
	return rc;
}

/* Revoke keys whose write failed or whose client died; best effort (the
 * master also discards puts left PROCESSING). late: their bytes may still
 * land, so the master must not hand their space out again yet. */
static void put_revoke(struct px_proxy *px, struct px_req *r, const struct px_batch *keys,
		       uint32_t method, int late)
{
	ProtobufCMessage *rep;

	if (keys->n && atomic_load(&r->s->dead))
		LC_INFO("proxy", "client %llu gone: revoking %zu put(s)",
			(unsigned long long)r->s->client_id, keys->n);
	if (keys->n &&
	    !px_batch_keys_call(px, r->s->tenant, method, keys->keys, keys->n, late, 0, NULL, &rep))
		protobuf_c_message_free_unpacked(rep, NULL);
}

/* Into out (emptied), the keys of commit the master refused to commit; how
 * many. Committed keys refuse a revoke, so they are safe to name anyway. */
static size_t put_refused(struct px_req *r, const struct px_batch *commit, struct px_batch *out)
{
	out->n = 0;
	for (size_t i = 0; i < commit->n; i++)
		if (r->items[commit->idx[i]].result) {
			out->keys[out->n] = commit->keys[i];
			out->idx[out->n++] = commit->idx[i];
		}
	return out->n;
}

/* Split the started keys into those to commit, to revoke, and to revoke
 * late (revoke[1]). A gone client's keys are revoked, and fail (as the
 * put ahead's do): put_index must not take them for committed. */
static void put_sort(struct px_req *r, const struct px_batch *b, const int *started,
		     struct px_batch *commit, struct px_batch revoke[2])
{
	int dead = atomic_load(&r->s->dead);

	for (size_t i = 0; i < b->n; i++) {
		struct px_item *it = &r->items[b->idx[i]];
		struct px_batch *to;

		if (started[i] == PUT_UNPLACED)
			continue;
		if (dead && !it->result)
			it->result = LUNAR_ERR_TRANSFER_FAIL;
		to = it->result ? &revoke[started[i] == PUT_IN_FLIGHT] : commit;
		to->keys[to->n] = b->keys[i];
		to->idx[to->n++] = b->idx[i];
	}
}

/* HA: index what was committed, for a new leader (objidx.c). */
static void put_index(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		      const Lunar__BatchPutStartReply *rep)
{
	for (size_t i = 0; px->objidx && i < b->n && i < rep->n_results; i++)
		if (!r->items[b->idx[i]].result && !rep->results[i]->code)
			px_index_committed(px, r, b->keys[i], &r->items[b->idx[i]],
					   rep->results[i]);
}

/* Stands for "the result of this key's first occurrence" until it is known;
 * any nonzero result keeps an item out of px_batch_collect. */
#define PX_DUP_PENDING INT64_MIN
#define PX_DUP_SLOTS   (2u * LUNAR_BATCH_MAX) /* a power of two over 2 x count */

/* A key named again later in one batch: only its first occurrence goes to the
 * master, so which value is kept does not depend on timing; in first[] each
 * later occurrence's index maps to the first's (lunar.h, lunar_batch_put). */
static uint32_t put_mark_dups(struct px_req *r, uint16_t first[LUNAR_BATCH_MAX])
{
	uint16_t slot[PX_DUP_SLOTS]; /* item index + 1, 0 when empty */
	uint32_t ndup = 0;

	if (r->count < 2 || r->count > LUNAR_BATCH_MAX)
		return 0;
	memset(slot, 0, sizeof(slot));
	for (uint32_t i = 0; i < r->count; i++) {
		const struct px_item *it = &r->items[i];
		uint32_t h = lc_crc32c(0, it->key, it->key_len) & (PX_DUP_SLOTS - 1);

		first[i] = (uint16_t)i;
		if (it->result)
			continue;
		for (; slot[h]; h = (h + 1) & (PX_DUP_SLOTS - 1)) {
			const struct px_item *o = &r->items[slot[h] - 1];

			if (o->key_len == it->key_len && !memcmp(o->key, it->key, it->key_len))
				break;
		}
		if (!slot[h]) {
			slot[h] = (uint16_t)(i + 1);
			continue;
		}
		first[i] = (uint16_t)(slot[h] - 1);
		r->items[i].result = PX_DUP_PENDING;
		ndup++;
	}
	return ndup;
}

static int64_t put_run(struct px_proxy *px, struct px_req *r)
{
	const struct put_calls *calls = r->sqe.op == LC_OP_UPSERT ? &upsert_calls : &put_calls;
	struct px_batch b, commit = {0}, revoke[2] = {{0}};
	ProtobufCMessage *rep = NULL;
	int started_in[PX_BATCH_INLINE], *started = started_in;
	uint64_t epoch, mark;
	size_t placed;
	int unanswered = 0;
	int rc;

	if (px_batch_collect(r, &b))
		return LUNAR_ERR_INTERNAL;
	if (!b.n)
		goto out_batch;
	if (b.n > PX_BATCH_INLINE)
		started = calloc(b.n, sizeof(*started));
	else
		memset(started_in, 0, sizeof(started_in));
	if (!started || px_batch_collect(r, &commit) || px_batch_collect(r, &revoke[0]) ||
	    px_batch_collect(r, &revoke[1])) {
		px_batch_fail(r, &b, LUNAR_ERR_INTERNAL);
		goto out;
	}
	commit.n = revoke[0].n = revoke[1].n = 0;
	if (r->sqe.op == LC_OP_UPSERT) /* the old value's range may go at once */
		px_resv_tell_landed(px);
	epoch = eng_engine_epoch(px->engine);
	mark = px_uncommit_mark(px);
	rc = put_start(px, r, &b, calls->start, &rep, &unanswered);
	if (rc) {
		/* The master may have placed them, unheard: revoked, or they
		 * stay PROCESSING, where a retry finds them "already there".
		 * Late: the revoke may take another session's put of the key
		 * (one client id a proxy), whose bytes may be on their way. */
		if (unanswered)
			put_revoke(px, r, &b, calls->revoke, 1);
		px_batch_fail(r, &b, rc);
		goto out;
	}
	placed =
	    put_transfer(px, r, &b, (const Lunar__BatchPutStartReply *)rep, epoch, mark, started);
	if (placed)
		px_resv_room_seen(px);
	/* Nothing placed, nothing to hold back: a put refused for space fails fast. */
	if (placed && px->cfg.debug_put_delay_ms)
		px_debug_hold(r->s, px->cfg.debug_put_delay_ms);
	put_sort(r, &b, started, &commit, revoke);
	put_revoke(px, r, &revoke[0], calls->revoke, 0);
	put_revoke(px, r, &revoke[1], calls->revoke, 1);
	/* A commit the master may not have heard of: revoked, so that no key
	 * stays PROCESSING, where a retry's PutStart would find it "already
	 * there" and report success. One it did commit refuses the revoke. */
	if (put_commit(px, r, &commit, calls->end))
		put_revoke(px, r, &commit, calls->revoke, 0);
	else if (put_refused(r, &commit, &revoke[0])) /* one by one (an HA fence lapsed) */
		put_revoke(px, r, &revoke[0], calls->revoke, 0);
	put_index(px, r, &b, (const Lunar__BatchPutStartReply *)rep);
	if (r->sqe.op == LC_OP_UPSERT)
		px_batch_drop_leases(px, r, &commit);
out:
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	px_batch_fini(&commit);
	px_batch_fini(&revoke[0]);
	px_batch_fini(&revoke[1]);
	if (started != started_in)
		free(started);
out_batch:
	px_batch_fini(&b);
	return 0;
}

int64_t px_run_put(struct px_proxy *px, struct px_req *r)
{
	uint16_t first[LUNAR_BATCH_MAX];
	uint32_t ndup;
	int64_t rc64;

	for (uint32_t i = 0; i < r->count; i++)
		if (!r->items[i].result && r->items[i].total == 0)
			r->items[i].result = LUNAR_ERR_INVALID_PARAMS;
	ndup = put_mark_dups(r, first);
	px_put_ahead(px, r); /* what it leaves pending takes two calls */
	rc64 = put_run(px, r);
	for (uint32_t i = 0; i < r->count; i++)
		if (r->items[i].result == PX_AHEAD_DONE)
			r->items[i].result = 0;
	for (uint32_t i = 0; ndup && i < r->count; i++)
		if (r->items[i].result == PX_DUP_PENDING)
			r->items[i].result = r->items[first[i]].result;
	return rc64;
}
