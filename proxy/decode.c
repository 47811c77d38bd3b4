/*
 * decode.c - copy, validate, then build: the proxy's only reader of a
 * client's request blocks; see decode.h.
 */
#include "decode.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "crc32c.h"
#include "failpoint.h"
#include "futex.h"
#include "key.h"
#include "lunar.h"

/* Whether [off, off + len) lies inside the arena (where clients own bytes). */
static int in_arena(const struct px_region *rg, uint64_t off, uint64_t len)
{
	return off >= rg->arena_off && off - rg->arena_off <= rg->arena_size &&
	       len <= rg->arena_size - (off - rg->arena_off);
}

static int op_takes_items(uint16_t op)
{
	return op == LC_OP_PUT || op == LC_OP_UPSERT || op == LC_OP_GET || op == LC_OP_GET_SIZE ||
	       op == LC_OP_EXISTS || op == LC_OP_REMOVE || op == LC_OP_PREFIX_MATCH;
}

static int op_takes_segs(uint16_t op)
{
	return op == LC_OP_PUT || op == LC_OP_UPSERT || op == LC_OP_GET;
}

/* Hold registered range m for the life of the request (once). */
static void hold(struct px_req *r, struct px_mreg *m)
{
	for (uint32_t i = 0; i < r->nheld; i++)
		if (r->held[i] == m)
			return;
	px_mreg_get(m);
	r->held[r->nheld++] = m;
}

/* Resolve one segment to memory the proxy may touch, or NULL. */
static uint8_t *seg_base(const struct px_region *rg, struct px_req *r, const struct lc_seg *sg)
{
	struct px_mreg *m;

	if (sg->region == 0)
		return in_arena(rg, sg->off, sg->len) ? rg->base + sg->off : NULL;
	if (sg->region > LC_MAX_REGIONS || !(m = rg->mregs[sg->region]))
		return NULL;
	if (sg->off > m->len || sg->len > m->len - sg->off)
		return NULL;
	hold(r, m);
	return m->base + sg->off;
}

/* Check one item's segment list and copy it out (segs holds nseg). */
static int copy_segs(const struct px_region *rg, const struct lc_item *it, struct lc_seg *segs,
		     const char **why)
{
	uint64_t bytes = (uint64_t)it->nseg * sizeof(struct lc_seg);

	if (it->nseg == 0 || it->nseg > LUNAR_IOV_MAX) {
		*why = "segment count out of range";
		return LUNAR_ERR_PROTOCOL;
	}
	if (it->seg_off % 8 || !in_arena(rg, it->seg_off, bytes)) {
		*why = "segment list outside the arena";
		return LUNAR_ERR_PROTOCOL;
	}
	memcpy(segs, rg->base + it->seg_off, bytes);
	return 0;
}

/* The value's CRC32C from its pieces' (LC_SQE_SEG_CRC): the client's word. */
static void given_crc(const struct px_req *r, const struct lc_seg *segs, struct px_item *pi)
{
	uint32_t crc = 0;

	if (!(r->sqe.flags & LC_SQE_SEG_CRC) ||
	    (r->sqe.op != LC_OP_PUT && r->sqe.op != LC_OP_UPSERT))
		return;
	for (int i = 0; i < pi->iovcnt; i++)
		crc = i ? lc_crc32c_combine(crc, segs[i].crc, segs[i].len) : segs[i].crc;
	pi->crc = crc;
	pi->crc_given = true;
}

static int resolve_segs(const struct px_region *rg, struct px_req *r, const struct lc_seg *segs,
			struct px_item *pi, const char **why)
{
	given_crc(r, segs, pi);
	pi->staged = true;
	for (int i = 0; i < pi->iovcnt; i++) {
		uint8_t *p = seg_base(rg, r, &segs[i]);

		if (!p) {
			*why = "value bytes outside the arena and registered memory";
			return LUNAR_ERR_PROTOCOL;
		}
		pi->iov[i].iov_base = p;
		pi->iov[i].iov_len = segs[i].len;
		pi->staged = pi->staged && segs[i].region == 0;
		pi->total += segs[i].len;
	}
	return 0;
}

/* One allocation per item: its key, then its iovecs (none: iov NULL). */
static int item_alloc(struct px_item *pi, uint32_t key_len, uint32_t nseg)
{
	size_t key_bytes =
	    ((size_t)key_len + 1 + _Alignof(struct iovec) - 1) & ~(_Alignof(struct iovec) - 1);

	pi->key = malloc(key_bytes + nseg * sizeof(struct iovec));
	if (!pi->key)
		return -ENOMEM;
	pi->iov = nseg ? (struct iovec *)(void *)(pi->key + key_bytes) : NULL;
	pi->iovcnt = (int)nseg;
	return 0;
}

static int decode_item(const struct px_region *rg, struct px_req *r, uint64_t off,
		       struct px_item *pi, const char **why)
{
	struct lc_seg segs[LUNAR_IOV_MAX];
	int takes_segs = op_takes_segs(r->sqe.op);
	struct lc_item it;
	int rc;

	memcpy(&it, rg->base + off, sizeof(it));
	pi->item_off = off;
	if (it.key_len == 0 || it.key_len > LUNAR_KEY_MAX ||
	    !in_arena(rg, it.key_off, it.key_len)) {
		*why = "key outside the arena or of bad length";
		return LUNAR_ERR_PROTOCOL;
	}
	if (!takes_segs && it.nseg != 0) {
		*why = "segments given to an operation without values";
		return LUNAR_ERR_PROTOCOL;
	}
	if (takes_segs && (rc = copy_segs(rg, &it, segs, why)) != 0)
		return rc;
	rc = item_alloc(pi, it.key_len, it.nseg);
	if (rc)
		return rc;
	memcpy(pi->key, rg->base + it.key_off, it.key_len);
	pi->key[it.key_len] = '\0';
	pi->key_len = it.key_len;
	pi->result = lc_key_check(pi->key, pi->key_len);
	return takes_segs ? resolve_segs(rg, r, segs, pi, why) : 0;
}

static int decode_items(const struct px_region *rg, struct px_req *r, const char **why)
{
	const struct lc_sqe *q = &r->sqe;
	int rc;

	if (q->count == 0 || q->count > LUNAR_BATCH_MAX) {
		*why = "item count out of range";
		return LUNAR_ERR_PROTOCOL;
	}
	if (q->arg_len != (uint64_t)q->count * sizeof(struct lc_item) || q->arg_off % 8 ||
	    !in_arena(rg, q->arg_off, q->arg_len)) {
		*why = "item array outside the arena";
		return LUNAR_ERR_PROTOCOL;
	}
	/* Most requests name one key: its item lives in the request. */
	r->items = q->count == 1 ? &r->one : calloc(q->count, sizeof(*r->items));
	if (!r->items)
		return -ENOMEM;
	r->count = q->count;
	for (uint32_t i = 0; i < q->count; i++) {
		rc = decode_item(rg, r, q->arg_off + (uint64_t)i * sizeof(struct lc_item),
				 &r->items[i], why);
		if (rc)
			return rc;
	}
	return 0;
}

static int decode_pattern(const struct px_region *rg, struct px_req *r, const char **why)
{
	const struct lc_sqe *q = &r->sqe;

	if (q->count || q->arg_len == 0 || q->arg_len > LUNAR_KEY_MAX ||
	    !in_arena(rg, q->arg_off, q->arg_len)) {
		*why = "pattern outside the arena, of bad length, or with items";
		return LUNAR_ERR_PROTOCOL;
	}
	r->pattern = malloc(q->arg_len + 1);
	if (!r->pattern)
		return -ENOMEM;
	memcpy(r->pattern, rg->base + q->arg_off, q->arg_len);
	r->pattern[q->arg_len] = '\0';
	if (strlen(r->pattern) != q->arg_len) {
		*why = "NUL inside the pattern";
		return LUNAR_ERR_PROTOCOL;
	}
	return 0;
}

/* Preferred segment names of a put: copied, split, each non-empty. */
static int decode_pref(const struct px_region *rg, struct px_req *r, const char **why)
{
	const struct lc_sqe *q = &r->sqe;
	char *p, *end;

	if (!q->pref_len)
		return 0;
	if ((q->op != LC_OP_PUT && q->op != LC_OP_UPSERT) || q->pref_len > LC_PREF_BYTES ||
	    !in_arena(rg, q->pref_off, q->pref_len)) {
		*why = "preferred segments outside the arena or on a wrong operation";
		return LUNAR_ERR_PROTOCOL;
	}
	r->pref_buf = malloc(q->pref_len);
	if (!r->pref_buf)
		return -ENOMEM;
	memcpy(r->pref_buf, rg->base + q->pref_off, q->pref_len);
	end = r->pref_buf + q->pref_len;
	if (end[-1] != '\0') {
		*why = "preferred segment names not terminated";
		return LUNAR_ERR_PROTOCOL;
	}
	for (p = r->pref_buf; p < end; p += strlen(p) + 1) {
		if (!*p || r->npref == LC_PREF_MAX) {
			*why = "empty or too many preferred segment names";
			return LUNAR_ERR_PROTOCOL;
		}
		r->pref[r->npref++] = p;
	}
	return 0;
}

int px_decode(const struct px_region *rg, const struct lc_sqe *sqe, struct px_req **out,
	      const char **why)
{
	struct px_req *r;
	int rc = 0;

	if (sqe->slot >= rg->slot_count) {
		*why = "completion slot out of range";
		return LUNAR_ERR_PROTOCOL;
	}
	if (sqe->op == 0 || sqe->op >= LC_OP_MAX) {
		*why = "unknown operation";
		return LUNAR_ERR_PROTOCOL;
	}
	r = LC_FAILPOINT("proxy-decode-alloc") ? NULL : malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	memset(r, 0, offsetof(struct px_req, pref));
	r->sqe = *sqe;
	rc = decode_pref(rg, r, why);
	if (!rc && op_takes_items(sqe->op))
		rc = decode_items(rg, r, why);
	else if (!rc && sqe->op == LC_OP_REMOVE_REGEX)
		rc = decode_pattern(rg, r, why);
	else if (!rc && (sqe->count || sqe->arg_len)) {
		*why = "arguments given to an operation without any";
		rc = LUNAR_ERR_PROTOCOL;
	}
	if (rc) {
		px_req_free(r);
		return rc;
	}
	/* A value read into one piece of the arena is told as it lands. */
	if (sqe->op == LC_OP_GET && r->count == 1 && r->items[0].staged && r->items[0].iovcnt == 1)
		r->items[0].landed = &rg->slots[sqe->slot].landed;
	*out = r;
	return 0;
}

void px_req_free(struct px_req *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; i < r->count; i++)
		free(r->items[i].key);
	for (uint32_t i = 0; i < r->nheld; i++)
		px_mreg_put(r->held[i]);
	if (r->items != &r->one)
		free(r->items);
	free(r->pattern);
	free(r->pref_buf);
	free(r);
}

/* Stamp the slot of sqe (in range) with result and the reason (r's, or
 * none without r), then DONE; wake its waiter. */
static void complete_slot(const struct px_region *rg, const struct lc_sqe *sqe,
			  const struct px_req *r, int64_t result)
{
	struct lc_cslot *slot = &rg->slots[sqe->slot];
	uint32_t old;

	LC_WRITE_ONCE(slot->reason, r ? r->reason : (uint32_t)LC_REASON_NONE);
	LC_WRITE_ONCE(slot->reason_arg, r ? r->reason_arg : 0);
	LC_WRITE_ONCE(slot->result, result);
	LC_WRITE_ONCE(slot->seq, sqe->seq);
	LC_WRITE_ONCE(slot->done_ns, lc_now_ns());
	/* The client may reuse what this request named once it sees DONE:
	 * the reads of its next requests come after (session_drain). */
	LC_ORDERED_BEFORE(rg->base);
	/* Pairs with the waiter's acquire load of state: results before DONE. */
	old = lc_xchg(&slot->state, (uint32_t)LC_SLOT_DONE);
	if (old == LC_SLOT_WAITING)
		lc_futex_wake(&slot->state, 1);
}

int px_refuse(const struct px_region *rg, const struct lc_sqe *sqe, int64_t result,
	      const char **why)
{
	if (sqe->slot >= rg->slot_count) {
		*why = "completion slot out of range";
		return LUNAR_ERR_PROTOCOL;
	}
	complete_slot(rg, sqe, NULL, result);
	return 0;
}

void px_complete(const struct px_region *rg, const struct px_req *r, int64_t result)
{
	for (uint32_t i = 0; i < r->count; i++) {
		int64_t *res =
		    (int64_t *)(rg->base + r->items[i].item_off + offsetof(struct lc_item, result));

		LC_WRITE_ONCE(*res, r->items[i].result);
	}
	complete_slot(rg, &r->sqe, r, result);
}
