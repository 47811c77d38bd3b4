/*
 * ops_keys.c - remove. Our cached lease of a key the master removed (or no
 * longer has) is forgotten; one whose remove it refused stays, with what
 * its readers need.
 */
#include "lunar.h"
#include "ops.h"

static void remove_keys(struct px_proxy *px, struct px_req *r, const struct px_batch *b)
{
	Lunar__BatchRemoveRequest rq = LUNAR__BATCH_REMOVE_REQUEST__INIT;
	const Lunar__BatchCodesReply *codes;
	ProtobufCMessage *rep;
	int rc;

	rq.tenant = r->s->tenant;
	rq.force = (r->sqe.flags & LC_SQE_FORCE) != 0;
	rq.n_keys = b->n;
	rq.keys = b->keys;
	px_resv_tell_landed(px);
	rc = px_mc_call(px->mc, LUNAR__METHOD__BATCH_REMOVE, &rq.base, &rep);
	if (!rc && (rc = px_mc_code(rep)) != 0)
		protobuf_c_message_free_unpacked(rep, NULL);
	if (rc) {
		px_batch_drop_leases(px, r, b); /* removed or not: we cannot tell */
		px_batch_fail(r, b, rc);
		return;
	}
	codes = (const Lunar__BatchCodesReply *)rep;
	for (size_t i = 0; i < b->n; i++) {
		int64_t code = i < codes->n_codes ? codes->codes[i] : LUNAR_ERR_PROTOCOL;

		if (code >= 0 || code == LUNAR_ERR_OBJECT_NOT_FOUND || code == LUNAR_ERR_PROTOCOL) {
			px_lease_cache_drop(px->leases, r->s->tenant, b->keys[i]);
			px_lease_cap_drop(r->s, b->keys[i], r->items[b->idx[i]].key_len);
		}
		if (px->objidx && (code >= 0 || code == LUNAR_ERR_OBJECT_NOT_FOUND))
			px_objidx_remove(px->objidx, r->s->tenant, b->keys[i]);
		r->items[b->idx[i]].result = code;
	}
	protobuf_c_message_free_unpacked(rep, NULL);
}

int64_t px_run_remove(struct px_proxy *px, struct px_req *r)
{
	struct px_batch b;

	if (px_batch_collect(r, &b))
		return LUNAR_ERR_INTERNAL;
	if (b.n)
		remove_keys(px, r, &b);
	px_batch_fini(&b);
	return 0;
}
