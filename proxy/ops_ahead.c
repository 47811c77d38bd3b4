/*
 * ops_ahead.c - a put ahead: each value is written into a piece of the
 * space the master reserved for this proxy (resv.c) while one
 * BatchPutCommit, sent beside the writes, makes them objects. One data
 * round trip and one master round trip, at once, where PutStart + write +
 * PutEnd make two master round trips one after the other. The put returns
 * only after both: a value returned 0 for is visible everywhere. Until its
 * bytes land, a reader finds them unlike the CRC32C committed (a miss,
 * never wrong bytes); a key whose write failed has its commit taken back.
 * Keys it cannot do (no piece at hand, a failed write, a reservation the
 * master no longer knows) are left to the two-call path.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
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

/* The CRC32C of every value liblunar did not checksum, one pass each: the
 * commit names it before the bytes are sent. */
static void checksum_all(struct px_req *r, const struct px_batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct px_item *it = &r->items[b->idx[i]];
		uint32_t crc = 0;

		if (it->crc_given)
			continue;
		for (int k = 0; k < it->iovcnt; k++)
			crc = lc_crc32c(crc, it->iov[k].iov_base, it->iov[k].iov_len);
		it->crc = crc;
		it->crc_given = true;
	}
}

/* Start writing every value to its piece; the engine's I/O threads carry
 * them while this thread makes the commit. 0, or -1 with nothing sent. */
static int write_start(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		       struct ahead *a, struct eng_cq *cq)
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
		    .crc_known = 1,
		    .known_crc = it->crc,
		};
	}
	return eng_xfer_submit(px->engine, cq, a->ops, (int)b->n) ? -1 : 0;
}

/* Wait for the n writes started; this thread runs those still queued. */
static void write_wait(struct eng_cq *cq, size_t n)
{
	struct eng_op *done[16];

	while (n)
		n -= (size_t)eng_cq_wait(cq, done, 16, ENG_WAIT_FOREVER);
}

/* Did key i's write fail, and may its bytes still land? */
static int write_failed(struct px_proxy *px, const struct ahead *a, size_t i, int *landing)
{
	const struct eng_op *op = &a->ops[i];

	*landing =
	    op->result && op->result != ENG_XFER_UNSENT && strcmp(op->endpoint, px->endpoint) != 0;
	if (op->result)
		LC_DEBUG("proxy", "put-ahead: a write to %s failed (%d)", op->endpoint, op->result);
	return op->result != 0;
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

/* The keys whose commit is to be taken back: their write failed, or their
 * client died, after the commit was sent. */
struct undo {
	size_t n;
	char **keys;
	size_t *pos; /* the keys' places in the batch */
};

/* Key i's piece, which its commit did not make an object: as the commit's
 * answer says, unless bytes of a failed write may still land there. */
static void settle_unmade(struct px_proxy *px, struct ahead *a, size_t i, enum px_piece_end how,
			  int landing)
{
	settle(px, a, i, landing && how == PX_PIECE_UNUSED ? PX_PIECE_TAINTED : how);
}

/* Fold the commit's answer and the writes' results into the keys and their
 * pieces; a key committed whose bytes did not all land goes into u. */
static void commit_results(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			   struct ahead *a, const Lunar__BatchPutStartReply *rep, const size_t *pos,
			   size_t n, int dead, struct undo *u)
{
	for (size_t j = 0; j < n; j++) {
		size_t i = pos[j];
		struct px_item *it = &r->items[b->idx[i]];
		const Lunar__PutStartResult *res = rep->results[j];
		int landing, failed = write_failed(px, a, i, &landing) || dead;

		switch (res->code) {
		case 0:
			settle(px, a, i, PX_PIECE_COMMITTED);
			if (failed) {
				u->keys[u->n] = b->keys[i];
				u->pos[u->n++] = i;
				break;
			}
			index_one(px, r, b->keys[i], it, res);
			it->result = PX_AHEAD_DONE;
			break;
		case LUNAR_ERR_OBJECT_ALREADY_EXISTS: /* first value kept, as PutStart's */
			settle_unmade(px, a, i, PX_PIECE_UNUSED, landing);
			it->result = PX_AHEAD_DONE;
			break;
		case LUNAR_ERR_ILLEGAL_CLIENT: /* the reservation is gone: two calls */
			settle(px, a, i, PX_PIECE_GONE);
			break;
		case LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS:
			settle_unmade(px, a, i, PX_PIECE_UNUSED, landing);
			break;
		case LUNAR_ERR_TENANT_QUOTA_EXCEEDED:
		case LUNAR_ERR_INVALID_KEY:
		case LUNAR_ERR_INVALID_PARAMS: /* refused before its piece was touched */
			settle_unmade(px, a, i, PX_PIECE_UNUSED, landing);
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

/* Take back the commits in u (their ranges given back late): each key
 * then takes the two-call path, or fails when its client is gone or the
 * master kept the object (its readers then miss it: its bytes are unlike
 * its CRC32C). */
static void uncommit(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		     const struct undo *u, int dead)
{
	Lunar__BatchKeysRequest rq = LUNAR__BATCH_KEYS_REQUEST__INIT;
	const Lunar__BatchCodesReply *codes = NULL;
	ProtobufCMessage *rep = NULL;
	int rc, kept = 0;

	if (!u->n)
		return;
	rq.client_id = px->client_id;
	rq.tenant = r->s->tenant;
	rq.n_keys = u->n;
	rq.keys = u->keys;
	rq.late = true;
	rq.committed = true;
	rc = px_mc_call(px->mc, LUNAR__METHOD__BATCH_PUT_REVOKE, &rq.base, &rep);
	if (!rc && !(rc = px_mc_code(rep)))
		codes = (const Lunar__BatchCodesReply *)rep;
	for (size_t j = 0; j < u->n; j++) {
		int code = codes ? (j < codes->n_codes ? codes->codes[j] : LUNAR_ERR_PROTOCOL) : rc;

		kept += code != 0;
		if (code || dead)
			r->items[b->idx[u->pos[j]]].result = LUNAR_ERR_TRANSFER_FAIL;
	}
	if (kept)
		LC_WARN("proxy", "put-ahead: %d commit(s) of failed writes not taken back (%s)",
			kept, lunar_strerror(codes ? LUNAR_ERR_INTERNAL : rc));
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
}

/* The commit of the keys being written, sent beside their writes. */
struct commit_call {
	Lunar__PutCommitItem *items;
	Lunar__PutCommitItem **ptrs;
	size_t *pos, n;
	int rc;		       /* the call's: it may have committed them */
	int refused;	       /* its reply's status: nothing committed */
	ProtobufCMessage *rep; /* on neither */
};

static void commit_send(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			struct ahead *a, struct commit_call *c)
{
	Lunar__BatchPutCommitRequest rq = LUNAR__BATCH_PUT_COMMIT_REQUEST__INIT;

	*c = (struct commit_call){.items = calloc(b->n, sizeof(*c->items)),
				  .ptrs = calloc(b->n, sizeof(*c->ptrs)),
				  .pos = calloc(b->n, sizeof(*c->pos))};
	if (!c->items || !c->ptrs || !c->pos)
		return; /* nothing sent */
	rq.client_id = px->client_id;
	rq.tenant = r->s->tenant;
	rq.items = c->ptrs;
	rq.n_items = c->n = (size_t)commit_items(r, b, a, c->items, c->ptrs, c->pos);
	c->rc = px_mc_call(px->mc, LUNAR__METHOD__BATCH_PUT_COMMIT, &rq.base, &c->rep);
	if (!c->rc && (c->refused = px_mc_code(c->rep)) != 0) {
		protobuf_c_message_free_unpacked(c->rep, NULL);
		c->rep = NULL;
	}
}

/* Once the writes ended: settle every key by the commit's answer and its
 * write. A call that failed may have committed them: its keys fail with
 * its code (as a failed PutEnd's), their pieces tainted. */
static void commit_end(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		       struct ahead *a, struct commit_call *c, int dead)
{
	const Lunar__BatchPutStartReply *res = (const Lunar__BatchPutStartReply *)c->rep;
	char *keys_in[PX_BATCH_INLINE];
	size_t pos_in[PX_BATCH_INLINE];
	struct undo u = {.keys = keys_in, .pos = pos_in};
	int landing;

	if (b->n > PX_BATCH_INLINE) {
		u.keys = calloc(b->n, sizeof(*u.keys));
		u.pos = calloc(b->n, sizeof(*u.pos));
	}
	if (!c->n || c->refused) { /* nothing committed: the two-call path decides */
		for (size_t i = 0; i < b->n; i++) {
			write_failed(px, a, i, &landing);
			settle_unmade(px, a, i, PX_PIECE_UNUSED, landing);
			if (dead)
				r->items[b->idx[i]].result = LUNAR_ERR_TRANSFER_FAIL;
		}
	} else if (!u.keys || !u.pos) { /* committed, maybe, with no room to undo */
		for (size_t i = 0; i < b->n; i++) {
			settle(px, a, i, PX_PIECE_TAINTED);
			r->items[b->idx[i]].result = LUNAR_ERR_TRANSFER_FAIL;
		}
	} else if (c->rc) {
		for (size_t j = 0; j < c->n; j++) {
			settle(px, a, c->pos[j], PX_PIECE_TAINTED);
			r->items[b->idx[c->pos[j]]].result = c->rc;
		}
	} else if (res->n_results == c->n) {
		commit_results(px, r, b, a, res, c->pos, c->n, dead, &u);
		uncommit(px, r, b, &u, dead);
	} else {
		/* an answer that does not add up (it may have committed): the
		 * two-call path decides, unless the bytes did not all land */
		for (size_t j = 0; j < c->n; j++) {
			size_t i = c->pos[j];

			settle(px, a, i, PX_PIECE_TAINTED);
			if (write_failed(px, a, i, &landing) || dead)
				r->items[b->idx[i]].result = LUNAR_ERR_TRANSFER_FAIL;
		}
	}
	if (u.keys != keys_in)
		free(u.keys);
	if (u.pos != pos_in)
		free(u.pos);
	if (c->rep)
		protobuf_c_message_free_unpacked(c->rep, NULL);
	free(c->items);
	free(c->ptrs);
	free(c->pos);
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

/* Write r's keys into their pieces and commit them, at once. */
static void put_ahead_all(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			  struct ahead *a)
{
	struct commit_call c;
	struct eng_cq *cq;

	if (atomic_load(&r->s->dead) || eng_cq_alloc(&cq)) {
		for (size_t i = 0; i < b->n; i++) /* nothing sent */
			settle(px, a, i, PX_PIECE_UNUSED);
		if (atomic_load(&r->s->dead)) /* its client is gone */
			px_batch_fail(r, b, LUNAR_ERR_TRANSFER_FAIL);
		return;
	}
	checksum_all(r, b);
	if (write_start(px, r, b, a, cq)) {
		for (size_t i = 0; i < b->n; i++)
			settle(px, a, i, PX_PIECE_UNUSED);
	} else {
		commit_send(px, r, b, a, &c);
		write_wait(cq, b->n);
		commit_end(px, r, b, a, &c, atomic_load(&r->s->dead));
	}
	eng_cq_free(cq);
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
	if (!take_all(px, r, &b, &a))
		put_ahead_all(px, r, &b, &a);
	ahead_fini(&a);
	px_batch_fini(&b);
}
