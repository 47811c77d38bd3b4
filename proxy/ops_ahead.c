/*
 * ops_ahead.c - a put ahead: each value is written into a piece of the
 * space the master reserved for this proxy (resv.c), and one BatchPutCommit
 * makes them objects: one data round trip and one master round trip, where
 * PutStart + write + PutEnd make two master round trips. Where the master
 * takes it (Reservation.beside), the commit, which names every value's
 * CRC32C, travels beside the writes: one round trip, the longer of the
 * two. The put returns only after the commit and every
 * write: a value returned 0 for is visible everywhere, its bytes in place.
 * A commit whose write then failed is taken back (BatchPutUncommit). Keys
 * it cannot do (no piece at hand, a failed write, a reservation the master
 * no longer knows) are left to the two-call path.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "engine/engine.h"
#include "failpoint.h"
#include "log.h"
#include "lunar.h"
#include "ops.h"

/* The largest value whose CRC32C a pass here takes for less than the
 * master's round trip that committing beside its write saves. */
#define PX_BESIDE_CRC_MAX (64u * 1024)

/* The pieces and writes of one request. */
struct ahead {
	size_t n;
	int beside;    /* the commit goes beside the writes */
	uint64_t mark; /* px_uncommit_mark before the commit */
	struct px_piece *pc;
	struct eng_op *ops;
	int *state; /* per key: enum below */
	struct px_piece pc_in[PX_BATCH_INLINE];
	struct eng_op ops_in[PX_BATCH_INLINE];
	int state_in[PX_BATCH_INLINE];
};

enum {
	AH_NONE,
	AH_HELD,     /* piece held, bytes written (or being written, beside) */
	AH_UNCOMMIT, /* committed beside a write that failed: to take back */
	AH_DONE	     /* piece settled */
};

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

/* Each value's write to its piece. */
static void build_ops(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
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
		    .epoch = px_piece_epoch(&a->pc[i]),
		    .want_crc = !it->crc_given,
		    .crc_known = it->crc_given,
		    .known_crc = it->crc,
		};
	}
}

/* Whether the bytes of a failed write may still land (then its piece is
 * tainted): any remote write that got under way. Only while its piece is
 * held: the endpoint is the piece's reservation's, which may go once the
 * piece is settled. */
static int may_land(struct px_proxy *px, const struct eng_op *op)
{
	return op->result && op->result != ENG_XFER_UNSENT && strcmp(op->endpoint, px->endpoint);
}

/* Write every value to its piece at once, then commit; a key whose write
 * failed goes back to the two-call path, its piece tainted if bytes may
 * still land. */
static void write_first(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			struct ahead *a)
{
	eng_xfer_batch(px->engine, a->ops, (int)b->n);
	for (size_t i = 0; i < b->n; i++) {
		const struct eng_op *op = &a->ops[i];

		if (!op->result) {
			if (op->want_crc)
				r->items[b->idx[i]].crc = op->crc;
			continue;
		}
		LC_DEBUG("proxy", "put-ahead: a write to %s failed (%d)", op->endpoint, op->result);
		settle(px, a, i, may_land(px, op) ? PX_PIECE_TAINTED : PX_PIECE_UNUSED);
	}
}

/*
 * May the commit go beside the writes (no side effect)? Every piece's
 * master takes it, and every value's CRC32C can be known first: the
 * client's (staged), or taken here in a pass of its own (beside_crcs)
 * where that costs no more than taking it on the way would: a value up to
 * PX_BESIDE_CRC_MAX, or one whose write would take it in the same kind of
 * pass (TCP in one slice, RDMA: eng_engine_crc_on_way). A write that
 * takes it on the way for less (a local copy; slices, each checksummed on
 * its own thread) is committed after instead.
 */
static int beside_may(struct px_proxy *px, const struct px_req *r, const struct px_batch *b,
		      const struct ahead *a)
{
	if (px->cfg.commit_after_write)
		return 0;
	for (size_t i = 0; i < b->n; i++) {
		const struct px_item *it = &r->items[b->idx[i]];

		if (!px_piece_beside(&a->pc[i]) ||
		    (!it->crc_given && it->total > PX_BESIDE_CRC_MAX &&
		     eng_engine_crc_on_way(px->engine, a->ops[i].endpoint, it->total)))
			return 0;
	}
	return 1;
}

/* Take the CRC32C of each value whose client named none: its write then
 * names it (a keyed one in its header) rather than taking it again. */
static void beside_crcs(struct px_req *r, const struct px_batch *b, struct ahead *a)
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
		a->ops[i].want_crc = 0;
		a->ops[i].crc_known = 1;
		a->ops[i].known_crc = crc;
	}
}

/* A BatchPutCommit (or Uncommit) request over some of a request's keys:
 * pos[k] is the key of item k. */
struct commit_rq {
	Lunar__BatchPutCommitRequest rq;
	Lunar__PutCommitItem *items, **ptrs;
	size_t *pos;
};

/* Room for n items; 0, or -1 (then the request has none). */
static int commit_rq_init(struct commit_rq *c, struct px_proxy *px, struct px_req *r, size_t n)
{
	c->rq = (Lunar__BatchPutCommitRequest)LUNAR__BATCH_PUT_COMMIT_REQUEST__INIT;
	c->rq.client_id = px->client_id;
	c->rq.tenant = r->s->tenant;
	c->items = calloc(n, sizeof(*c->items));
	c->rq.items = c->ptrs = calloc(n, sizeof(*c->ptrs));
	c->pos = calloc(n, sizeof(*c->pos));
	return c->items && c->ptrs && c->pos ? 0 : -1;
}

/* Item for key i (its piece's reservation and offset filled in). */
static Lunar__PutCommitItem *commit_rq_add(struct commit_rq *c, const struct px_batch *b,
					   const struct ahead *a, size_t i)
{
	Lunar__PutCommitItem *it = &c->items[c->rq.n_items];

	lunar__put_commit_item__init(it);
	it->key = b->keys[i];
	it->reservation = px_piece_resv(&a->pc[i]);
	it->offset = a->pc[i].off;
	c->ptrs[c->rq.n_items] = it;
	c->pos[c->rq.n_items++] = i;
	return it;
}

static void commit_rq_fini(struct commit_rq *c)
{
	free(c->items);
	free(c->ptrs);
	free(c->pos);
}

/* The commit request's items for the keys held. */
static void commit_items(struct commit_rq *c, struct px_req *r, const struct px_batch *b,
			 const struct ahead *a)
{
	for (size_t i = 0; i < b->n; i++) {
		const struct px_item *it = &r->items[b->idx[i]];
		Lunar__PutCommitItem *ci;

		if (a->state[i] != AH_HELD)
			continue;
		ci = commit_rq_add(c, b, a, i);
		ci->size = it->total;
		ci->crc32c = it->crc;
		ci->hard_pin = (r->sqe.flags & LC_SQE_HARD_PIN) != 0;
		ci->soft_pin = (r->sqe.flags & LC_SQE_SOFT_PIN) != 0;
		ci->soft_pin_ttl_ms = r->sqe.soft_pin_ttl_ms;
		ci->beside = a->beside;
	}
}

/* Fold one key's commit answer (code, res) and its write into the key and
 * its piece. A beside key whose write failed: a commit is to be taken back,
 * and a piece it may land in is tainted whatever the answer. */
static void fold_one(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		     struct ahead *a, size_t i, const Lunar__PutStartResult *res)
{
	struct px_item *it = &r->items[b->idx[i]];
	const struct eng_op *op = &a->ops[i];
	enum px_piece_end unused = may_land(px, op) ? PX_PIECE_TAINTED : PX_PIECE_UNUSED;

	switch (res->code) {
	case 0:
		if (op->result) { /* beside only: a failed write is never committed after */
			a->state[i] = AH_UNCOMMIT;
			break;
		}
		settle(px, a, i, PX_PIECE_COMMITTED);
		px_index_committed(px, r, b->keys[i], it, res);
		it->result = PX_AHEAD_DONE;
		if (a->beside)
			PX_COUNT(px, puts_beside, 1);
		break;
	case LUNAR_ERR_OBJECT_ALREADY_EXISTS: /* first value kept, as PutStart's */
		settle(px, a, i, unused);
		/* unless that value is one of ours about to be taken back */
		it->result = px_uncommit_waits(px, r->s->tenant, b->keys[i], a->mark)
				 ? LUNAR_ERR_TRANSFER_FAIL
				 : PX_AHEAD_DONE;
		break;
	case LUNAR_ERR_ILLEGAL_CLIENT: /* the reservation is gone: two calls */
		settle(px, a, i, unused == PX_PIECE_TAINTED ? unused : PX_PIECE_GONE);
		break;
	case LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS: settle(px, a, i, unused); break;
	case LUNAR_ERR_TENANT_QUOTA_EXCEEDED:
	case LUNAR_ERR_INVALID_KEY:
	case LUNAR_ERR_INVALID_PARAMS: /* refused before its piece was touched */
		settle(px, a, i, unused);
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

/* Fold the commit's answer (rc, rep) into the keys sent (pos[0..n)), once
 * their writes are done. A call that failed may have committed them: its
 * keys fail with its code (as a failed PutEnd's), their pieces tainted;
 * one whose write failed beside it is taken back instead (uncommit). */
static void fold(struct px_proxy *px, struct px_req *r, const struct px_batch *b, struct ahead *a,
		 int rc, const ProtobufCMessage *rep, const size_t *pos, size_t n)
{
	const Lunar__BatchPutStartReply *res = (const Lunar__BatchPutStartReply *)rep;
	int code = rc ? rc : px_mc_code(rep), maybe = rc || !code; /* committed? */

	if (!code && res->n_results == n) {
		for (size_t j = 0; j < n; j++)
			fold_one(px, r, b, a, pos[j], res->results[j]);
		return;
	}
	for (size_t j = 0; j < n; j++) {
		if (maybe && a->ops[pos[j]].result) { /* its write failed beside it */
			a->state[pos[j]] = AH_UNCOMMIT;
			continue;
		}
		if (rc) {
			settle(px, a, pos[j], PX_PIECE_TAINTED);
			r->items[b->idx[pos[j]]].result = rc;
		} else {
			/* refused whole (nothing committed), or an answer that
			 * does not add up (it may have): the two-call path decides */
			settle(px, a, pos[j],
			       code && !may_land(px, &a->ops[pos[j]]) ? PX_PIECE_UNUSED
								      : PX_PIECE_TAINTED);
		}
	}
}

/* Take back the keys that may have been committed beside a write that
 * failed. One taken back, or not there (never committed, or gone since),
 * goes to the two-call path; one that could not be fails as its write did
 * (its bytes are wrong: readers find its CRC32C unlike them), and when the
 * master did not answer, the heartbeat asks again (px_uncommit_later).
 * Their pieces are tainted (bytes may land; the master gives the ranges
 * back late). */
static void uncommit(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		     struct ahead *a)
{
	const Lunar__BatchCodesReply *res;
	ProtobufCMessage *rep = NULL;
	struct commit_rq c;
	size_t i = 0;
	int rc = LUNAR_ERR_INTERNAL;

	while (i < b->n && a->state[i] != AH_UNCOMMIT)
		i++;
	if (i == b->n) /* every write landed: the usual case */
		return;
	/* tests: no memory for the call */
	if (!commit_rq_init(&c, px, r, b->n) && !LC_FAILPOINT("proxy-uncommit-alloc")) {
		for (i = 0; i < b->n; i++)
			if (a->state[i] == AH_UNCOMMIT)
				commit_rq_add(&c, b, a, i);
		rc = LC_FAILPOINT("proxy-uncommit")
			 ? LUNAR_ERR_RPC_TIMEOUT
			 : px_mc_call(px->mc, LUNAR__METHOD__BATCH_PUT_UNCOMMIT, &c.rq.base, &rep);
	}
	res = (const Lunar__BatchCodesReply *)rep;
	if (!rc && (px_mc_code(rep) || res->n_codes != c.rq.n_items))
		rc = LUNAR_ERR_PROTOCOL;
	if (rc) /* not asked, or no answer for the keys: asked again later */
		for (i = 0; i < b->n; i++)
			if (a->state[i] == AH_UNCOMMIT)
				px_uncommit_later(px, r->s->tenant, b->keys[i],
						  px_piece_resv(&a->pc[i]), a->pc[i].off);
	for (size_t k = 0; !rc && k < c.rq.n_items; k++) {
		if (!res->codes[k])
			PX_COUNT(px, puts_uncommitted, 1);
		if (!res->codes[k] || res->codes[k] == LUNAR_ERR_OBJECT_NOT_FOUND)
			a->state[c.pos[k]] = AH_HELD; /* gone: the two-call path puts it */
	}
	for (i = 0; i < b->n; i++) {
		const struct eng_op *op = &a->ops[i];

		if (a->state[i] == AH_UNCOMMIT) {
			a->state[i] = AH_HELD;
			r->items[b->idx[i]].result =
			    op->result == ENG_XFER_UNSENT ? LUNAR_ERR_TRANSFER_FAIL : op->result;
		}
		settle(px, a, i, PX_PIECE_TAINTED);
	}
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	commit_rq_fini(&c);
}

/* Commit the keys held: beside their writes (submitted here, and waited
 * for before the answer is folded in) or after them. */
static void commit(struct px_proxy *px, struct px_req *r, const struct px_batch *b, struct ahead *a,
		   struct eng_cq *cq)
{
	ProtobufCMessage *rep = NULL;
	struct commit_rq c;
	int rc = 0;

	if (!commit_rq_init(&c, px, r, b->n))
		commit_items(&c, r, b, a);
	if (cq && eng_xfer_submit(px->engine, cq, a->ops, (int)b->n)) {
		for (size_t i = 0; i < b->n; i++) /* never expected: nothing went */
			a->ops[i].result = ENG_XFER_UNSENT;
		c.rq.n_items = 0; /* nor does the commit */
		cq = NULL;
	}
	a->mark = px_uncommit_mark(px);
	if (c.rq.n_items) {
		rc = px_mc_call(px->mc, LUNAR__METHOD__BATCH_PUT_COMMIT, &c.rq.base, &rep);
		(void)LC_FAILPOINT("proxy-commit-answered"); /* tests: sleep, answer in hand */
	}
	for (size_t got = 0; cq && got < b->n;) {
		struct eng_op *done[16];

		got += (size_t)eng_cq_wait(cq, done, 16, ENG_WAIT_FOREVER);
	}
	if (c.rq.n_items)
		fold(px, r, b, a, rc, rep, c.pos, c.rq.n_items);
	for (size_t i = 0; i < b->n; i++) /* not in the commit (no room for it) */
		if (a->state[i] == AH_HELD)
			settle(px, a, i,
			       may_land(px, &a->ops[i]) ? PX_PIECE_TAINTED : PX_PIECE_UNUSED);
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	commit_rq_fini(&c);
}

/* May r's keys go ahead at all? (A put, with reservations on.) */
static int eligible(struct px_proxy *px, const struct px_req *r, const struct px_batch *b)
{
	uint64_t max = px_resv_value_max(px);

	if (r->sqe.replica_num > 1 || r->npref || !b->n)
		return 0;
	for (size_t i = 0; i < b->n; i++)
		if (r->items[b->idx[i]].total > max)
			return 0;
	return 1;
}

/* Write and commit the keys whose pieces were taken. */
static void write_commit(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
			 struct ahead *a)
{
	struct eng_cq *cq = NULL;

	build_ops(px, r, b, a);
	a->beside = beside_may(px, r, b, a) && !eng_cq_alloc(&cq);
	if (a->beside) {
		beside_crcs(r, b, a);
		commit(px, r, b, a, cq);
		eng_cq_free(cq);
		uncommit(px, r, b, a);
		return;
	}
	write_first(px, r, b, a);
	if (atomic_load(&r->s->dead)) { /* its client is gone: nothing to commit */
		for (size_t i = 0; i < b->n; i++)
			if (a->state[i] == AH_HELD) {
				settle(px, a, i, PX_PIECE_UNUSED);
				r->items[b->idx[i]].result = LUNAR_ERR_TRANSFER_FAIL;
			}
	}
	commit(px, r, b, a, NULL);
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
		write_commit(px, r, &b, &a);
	ahead_fini(&a);
	px_batch_fini(&b);
}
