/*
 * ops_ahead.c - a put ahead: each value is written into a piece of the
 * space the master reserved for this proxy (resv.c), then one BatchPutCommit
 * makes them objects. One data round trip and one master round trip,
 * where PutStart + write + PutEnd make two master round trips. The put
 * returns only after the commit: a value returned 0 for is visible
 * everywhere. Keys it cannot do (no piece at hand, a failed write, a
 * reservation the master no longer knows) are left to the two-call path.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "log.h"
#include "lunar.h"
#include "ops.h"

/* The pieces and writes of one request. */
struct ahead {
	size_t n;
	struct px_piece *pc;
	struct eng_op *ops;
	int *state; /* per key: enum below */
	struct px_piece pc_in[PX_BATCH_INLINE];
	struct eng_op ops_in[PX_BATCH_INLINE];
	int state_in[PX_BATCH_INLINE];
};

enum { AH_NONE, AH_HELD /* piece held, bytes written */, AH_DONE /* piece settled */ };

/* Only the states start zeroed (AH_NONE): a piece is read only once taken
 * and an op only once built, and the inline arrays are KiBs a put. */
static int ahead_init(struct ahead *a, size_t n)
{
	a->n = n;
	a->pc = a->pc_in;
	a->ops = a->ops_in;
	a->state = a->state_in;
	if (n <= PX_BATCH_INLINE) {
		memset(a->state_in, 0, n * sizeof(*a->state_in));
		return 0;
	}
	a->pc = calloc(n, sizeof(*a->pc));
	a->ops = calloc(n, sizeof(*a->ops));
	a->state = calloc(n, sizeof(*a->state));
	return a->pc && a->ops && a->state ? 0 : -1;
}

static void ahead_fini(struct ahead *a)
{
	if (a->pc != a->pc_in)
		free(a->pc);
	if (a->ops != a->ops_in)
		free(a->ops);
	if (a->state != a->state_in)
		free(a->state);
}

static void settle(struct px_proxy *px, struct ahead *a, size_t i, enum px_piece_end how)
{
	if (a->state[i] != AH_HELD)
		return;
	px_resv_settle(px, &a->pc[i], how);
	a->state[i] = AH_DONE;
}

/* A piece for every key, or none at all (given back in reverse, so that
 * each goes back to its reservation's free end). */
static int take_all(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		    struct ahead *a)
{
	for (size_t i = 0; i < b->n; i++) {
		if (!px_resv_take(px, r->items[b->idx[i]].total, &a->pc[i])) {
			a->state[i] = AH_HELD;
			continue;
		}
		while (i--)
			settle(px, a, i, PX_PIECE_UNUSED);
		return -1;
	}
	return 0;
}

/* Write every value to its piece at once; a key whose write failed goes
 * back to the two-call path, its piece tainted if bytes may still land. */
static void write_all(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		      struct ahead *a)
{
	for (size_t i = 0; i < b->n; i++) {
		struct px_item *it = &r->items[b->idx[i]];

		a->ops[i] = (struct eng_op){
		    .endpoint = px_piece_endpoint(&a->pc[i]),
		    .dir = ENG_WRITE,
		    .off = a->pc[i].off,
		    .iov = it->iov,
		    .iovcnt = it->iovcnt,
		    .cap = px_piece_cap(&a->pc[i]),
		    .want_crc = !it->crc_given,
		    .crc_known = it->crc_given,
		    .known_crc = it->crc,
		};
	}
	eng_xfer_batch(px->engine, a->ops, (int)b->n);
	for (size_t i = 0; i < b->n; i++) {
		const struct eng_op *op = &a->ops[i];
		int remote = strcmp(op->endpoint, px->endpoint) != 0;

		if (!op->result) {
			if (op->want_crc)
				r->items[b->idx[i]].crc = op->crc;
			continue;
		}
		LC_DEBUG("proxy", "put-ahead: a write to %s failed (%d)", op->endpoint, op->result);
		settle(px, a, i,
		       remote && op->result != ENG_XFER_UNSENT ? PX_PIECE_TAINTED
							       : PX_PIECE_UNUSED);
	}
}

/* The commit request's items for the keys written; n_items of them. */
static int commit_items(struct px_req *r, const struct px_batch *b, struct ahead *a,
			Lunar__PutCommitItem *items, Lunar__PutCommitItem **ptrs, size_t *pos)
{
	size_t n = 0;

	for (size_t i = 0; i < b->n; i++) {
		const struct px_item *it = &r->items[b->idx[i]];

		if (a->state[i] != AH_HELD)
			continue;
		lunar__put_commit_item__init(&items[n]);
		items[n].key = b->keys[i];
		items[n].size = it->total;
		items[n].crc32c = it->crc;
		items[n].reservation = px_piece_resv(&a->pc[i]);
		items[n].offset = a->pc[i].off;
		items[n].hard_pin = (r->sqe.flags & LC_SQE_HARD_PIN) != 0;
		items[n].soft_pin = (r->sqe.flags & LC_SQE_SOFT_PIN) != 0;
		items[n].soft_pin_ttl_ms = r->sqe.soft_pin_ttl_ms;
		ptrs[n] = &items[n];
		pos[n++] = i;
	}
	return (int)n;
}

/* HA: index what was committed, for a new leader (objidx.c). */
static void index_one(struct px_proxy *px, struct px_req *r, const char *key,
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

/* Fold the commit's answer into the keys and their pieces. */
static void commit_results(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			   struct ahead *a, const Lunar__BatchPutStartReply *rep, const size_t *pos,
			   size_t n)
{
	for (size_t j = 0; j < n; j++) {
		size_t i = pos[j];
		struct px_item *it = &r->items[b->idx[i]];
		const Lunar__PutStartResult *res = rep->results[j];

		switch (res->code) {
		case 0:
			settle(px, a, i, PX_PIECE_COMMITTED);
			index_one(px, r, b->keys[i], it, res);
			it->result = PX_AHEAD_DONE;
			break;
		case LUNAR_ERR_OBJECT_ALREADY_EXISTS: /* first value kept, as PutStart's */
			settle(px, a, i, PX_PIECE_UNUSED);
			it->result = PX_AHEAD_DONE;
			break;
		case LUNAR_ERR_ILLEGAL_CLIENT: /* the reservation is gone: two calls */
			settle(px, a, i, PX_PIECE_GONE);
			break;
		case LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS:
			settle(px, a, i, PX_PIECE_UNUSED);
			break;
		case LUNAR_ERR_TENANT_QUOTA_EXCEEDED:
		case LUNAR_ERR_INVALID_KEY:
		case LUNAR_ERR_INVALID_PARAMS: /* refused before its piece was touched */
			settle(px, a, i, PX_PIECE_UNUSED);
			it->result = res->code;
			break;
		default:
			/* INTERNAL and codes of newer masters: the piece may have
			 * been cut out and freed, so it is never written again */
			settle(px, a, i, PX_PIECE_TAINTED);
			it->result = res->code;
			break;
		}
	}
}

/* Commit the keys written. A call that failed may have committed them: its
 * keys fail with its code (as a failed PutEnd's), their pieces tainted. */
static void commit(struct px_proxy *px, struct px_req *r, const struct px_batch *b, struct ahead *a)
{
	Lunar__BatchPutCommitRequest rq = LUNAR__BATCH_PUT_COMMIT_REQUEST__INIT;
	Lunar__PutCommitItem *items = calloc(b->n, sizeof(*items));
	Lunar__PutCommitItem **ptrs = calloc(b->n, sizeof(*ptrs));
	size_t *pos = calloc(b->n, sizeof(*pos));
	const Lunar__BatchPutStartReply *res;
	ProtobufCMessage *rep = NULL;
	int rc = 0, code;

	if (items && ptrs && pos) {
		rq.client_id = px->client_id;
		rq.tenant = r->s->tenant;
		rq.items = ptrs;
		rq.n_items = (size_t)commit_items(r, b, a, items, ptrs, pos);
	}
	if (rq.n_items)
		rc = px_mc_call(px->mc, LUNAR__METHOD__BATCH_PUT_COMMIT, &rq.base, &rep);
	if (!rq.n_items) {
		for (size_t i = 0; i < b->n; i++)
			settle(px, a, i, PX_PIECE_UNUSED); /* nothing sent */
	} else if (rc) {
		for (size_t j = 0; j < rq.n_items; j++) {
			settle(px, a, pos[j], PX_PIECE_TAINTED);
			r->items[b->idx[pos[j]]].result = rc;
		}
	} else {
		res = (const Lunar__BatchPutStartReply *)rep;
		code = px_mc_code(rep);
		if (!code && res->n_results == rq.n_items)
			commit_results(px, r, b, a, res, pos, rq.n_items);
		/* refused whole (nothing committed), or an answer that does
		 * not add up (it may have): the two-call path decides */
		for (size_t j = 0; j < rq.n_items; j++)
			settle(px, a, pos[j], code ? PX_PIECE_UNUSED : PX_PIECE_TAINTED);
		protobuf_c_message_free_unpacked(rep, NULL);
	}
	free(items);
	free(ptrs);
	free(pos);
}

/* May r's keys go ahead at all? */
static int eligible(struct px_proxy *px, const struct px_req *r, const struct px_batch *b)
{
	uint64_t max = px_resv_value_max(px);

	if (!px_resv_enabled(px) || r->sqe.op != LC_OP_PUT || r->sqe.replica_num > 1 || r->npref ||
	    !b->n)
		return 0;
	for (size_t i = 0; i < b->n; i++)
		if (r->items[b->idx[i]].total > max)
			return 0;
	return 1;
}

void px_put_ahead(struct px_proxy *px, struct px_req *r)
{
	struct px_batch b;
	struct ahead a;

	if (!px_resv_enabled(px) || r->sqe.op != LC_OP_PUT || px_batch_collect(r, &b))
		return;
	if (!eligible(px, r, &b)) {
		px_batch_fini(&b);
		return;
	}
	if (ahead_init(&a, b.n)) {
		ahead_fini(&a);
		px_batch_fini(&b);
		return;
	}
	if (!take_all(px, r, &b, &a)) {
		write_all(px, r, &b, &a);
		if (atomic_load(&r->s->dead)) { /* its client is gone: nothing to commit */
			for (size_t i = 0; i < b.n; i++)
				if (a.state[i] == AH_HELD) {
					settle(px, &a, i, PX_PIECE_UNUSED);
					r->items[b.idx[i]].result = LUNAR_ERR_TRANSFER_FAIL;
				}
		}
		commit(px, r, &b, &a);
	}
	ahead_fini(&a);
	px_batch_fini(&b);
}
