/*
 * ops_keys.c - key-only operations: exists, prefix match and remove.
 */
#include <stdlib.h>

#include "lunar.h"
#include "proxy/ops.h"

static int64_t run_exists(struct px_proxy *px, struct px_req *r, const struct px_batch *b)
{
	const Lunar__BatchCodesReply *codes;
	ProtobufCMessage *rep;
	int64_t leading = 0;
	int rc;

	rc = px_batch_keys_call(px, r->s, LUNAR__METHOD__BATCH_EXIST_KEY, b->keys, b->n, &rep);
	if (rc) {
		px_batch_fail(r, b, rc);
		return r->sqe.op == LC_OP_PREFIX_MATCH ? rc : 0;
	}
	codes = (const Lunar__BatchCodesReply *)rep;
	for (size_t i = 0; i < b->n; i++)
		r->items[b->idx[i]].result = i < codes->n_codes ? codes->codes[i] : LUNAR_ERR_PROTOCOL;
	protobuf_c_message_free_unpacked(rep, NULL);
	if (r->sqe.op != LC_OP_PREFIX_MATCH)
		return 0;
	while (leading < r->count && r->items[leading].result == 1)
		leading++;
	return leading;
}

static void run_remove(struct px_proxy *px, struct px_req *r, const struct px_batch *b)
{
	Lunar__RemoveRequest rq = LUNAR__REMOVE_REQUEST__INIT;
	ProtobufCMessage *rep;

	rq.tenant = r->s->tenant;
	rq.force = (r->sqe.flags & LC_SQE_FORCE) != 0;
	for (size_t i = 0; i < b->n; i++) {
		int rc;

		rq.key = b->keys[i];
		rc = px_mc_call(px->mc, LUNAR__METHOD__REMOVE, &rq.base, &rep);
		if (!rc) {
			rc = px_mc_code(rep);
			protobuf_c_message_free_unpacked(rep, NULL);
		}
		r->items[b->idx[i]].result = rc;
	}
}

int64_t px_run_keys(struct px_proxy *px, struct px_req *r)
{
	struct px_batch b;
	int64_t result = 0;

	if (px_batch_collect(r, &b))
		return LUNAR_ERR_INTERNAL;
	if (b.n && r->sqe.op == LC_OP_REMOVE)
		run_remove(px, r, &b);
	else if (b.n)
		result = run_exists(px, r, &b);
	px_batch_fini(&b);
	return result;
}
