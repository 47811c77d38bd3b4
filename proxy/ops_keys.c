/*
 * ops_keys.c - key-only operations: exists and prefix match (a key whose
 * lease we hold exists without asking the master), and remove (which also
 * forgets our cached leases of those keys).
 */
#include <stdlib.h>

#include "clock.h"
#include "lunar.h"
#include "proxy/ops.h"

/* Keys whose leases we hold are known to exist. */
static void exists_cached(struct px_proxy *px, struct px_req *r)
{
	uint64_t now = lc_now_ms();
	struct px_cached e;

	for (uint32_t i = 0; i < r->count; i++)
		if (!r->items[i].result &&
		    px_lease_cache_get(px->leases, r->s->tenant, r->items[i].key, now,
				       px_lease_margin_ms(px), &e))
			r->items[i].result = 1;
}

static void exists_fresh(struct px_proxy *px, struct px_req *r, const struct px_batch *b)
{
	const Lunar__BatchCodesReply *codes;
	ProtobufCMessage *rep;
	int rc;

	rc = px_batch_keys_call(px, r->s->tenant, LUNAR__METHOD__BATCH_EXIST_KEY, b->keys, b->n, 0,
				&rep);
	if (rc) {
		px_batch_fail(r, b, rc);
		return;
	}
	codes = (const Lunar__BatchCodesReply *)rep;
	for (size_t i = 0; i < b->n; i++)
		r->items[b->idx[i]].result = i < codes->n_codes ? codes->codes[i] : LUNAR_ERR_PROTOCOL;
	protobuf_c_message_free_unpacked(rep, NULL);
}

static void remove_keys(struct px_proxy *px, struct px_req *r, const struct px_batch *b)
{
	Lunar__BatchRemoveRequest rq = LUNAR__BATCH_REMOVE_REQUEST__INIT;
	const Lunar__BatchCodesReply *codes;
	ProtobufCMessage *rep;
	int rc;

	px_batch_drop_leases(px, r, b);
	rq.tenant = r->s->tenant;
	rq.force = (r->sqe.flags & LC_SQE_FORCE) != 0;
	rq.n_keys = b->n;
	rq.keys = b->keys;
	rc = px_mc_call(px->mc, LUNAR__METHOD__BATCH_REMOVE, &rq.base, &rep);
	if (!rc && (rc = px_mc_code(rep)) != 0)
		protobuf_c_message_free_unpacked(rep, NULL);
	if (rc) {
		px_batch_fail(r, b, rc);
		return;
	}
	codes = (const Lunar__BatchCodesReply *)rep;
	for (size_t i = 0; i < b->n; i++)
		r->items[b->idx[i]].result = i < codes->n_codes ? codes->codes[i] : LUNAR_ERR_PROTOCOL;
	protobuf_c_message_free_unpacked(rep, NULL);
}

int64_t px_run_keys(struct px_proxy *px, struct px_req *r)
{
	struct px_batch b;
	int64_t leading = 0;

	if (r->sqe.op != LC_OP_REMOVE)
		exists_cached(px, r);
	if (px_batch_collect(r, &b))
		return LUNAR_ERR_INTERNAL;
	if (b.n && r->sqe.op == LC_OP_REMOVE)
		remove_keys(px, r, &b);
	else if (b.n)
		exists_fresh(px, r, &b);
	px_batch_fini(&b);
	if (r->sqe.op != LC_OP_PREFIX_MATCH)
		return 0;
	while (leading < r->count && r->items[leading].result == 1)
		leading++;
	return leading;
}
