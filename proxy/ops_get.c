/*
 * ops_get.c - get and get-size: one BatchGetReplicaList for the request,
 * then each value read from its best replica (our own segment first, then
 * the others in the master's order) straight into the client's memory.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "lunar.h"
#include "proxy/ops.h"

/* The first bytes of it's destination that hold size bytes, as an iovec. */
static int trim_iov(const struct px_item *it, uint64_t size, struct iovec *out)
{
	int n = 0;

	for (int i = 0; i < it->iovcnt && size; i++) {
		out[n] = it->iov[i];
		if (out[n].iov_len > size)
			out[n].iov_len = size;
		size -= out[n].iov_len;
		if (out[n].iov_len)
			n++;
	}
	return n;
}

static int replica_usable(const Lunar__Replica *rp, uint64_t size)
{
	return rp->type == LUNAR__REPLICA_TYPE__MEMORY && rp->state == LUNAR__REPLICA_STATE__COMPLETE &&
	       rp->length == size;
}

/* Read one value; local replica first. Returns its size or a code. */
static int64_t get_one(struct px_proxy *px, const struct px_item *it,
		       const Lunar__GetReplicaListResult *res)
{
	struct iovec iov[LUNAR_IOV_MAX];
	int iovcnt, pass;

	if (res->size > it->total)
		return LUNAR_ERR_BUFFER_OVERFLOW;
	iovcnt = trim_iov(it, res->size, iov);
	for (pass = 0; pass < 2; pass++) {
		for (size_t k = 0; k < res->n_replicas; k++) {
			const Lunar__Replica *rp = res->replicas[k];
			int local = !strcmp(rp->endpoint, px->endpoint);

			if (local != (pass == 0) || !replica_usable(rp, res->size))
				continue;
			if (!eng_xfer(px->engine, rp->endpoint, ENG_READ, rp->offset, iov, iovcnt))
				return (int64_t)res->size;
		}
	}
	return res->n_replicas ? LUNAR_ERR_TRANSFER_FAIL : LUNAR_ERR_OBJECT_NOT_FOUND;
}

int64_t px_run_get(struct px_proxy *px, struct px_req *r)
{
	const Lunar__BatchGetReplicaListReply *rl;
	ProtobufCMessage *rep;
	struct px_batch b;
	int rc;

	if (px_batch_collect(r, &b))
		return LUNAR_ERR_INTERNAL;
	if (!b.n)
		goto out;
	rc = px_batch_keys_call(px, r->s, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, b.keys, b.n, &rep);
	if (rc) {
		px_batch_fail(r, &b, rc);
		goto out;
	}
	rl = (const Lunar__BatchGetReplicaListReply *)rep;
	for (size_t i = 0; i < b.n; i++) {
		struct px_item *it = &r->items[b.idx[i]];
		const Lunar__GetReplicaListResult *res = i < rl->n_results ? rl->results[i] : NULL;

		if (!res)
			it->result = LUNAR_ERR_PROTOCOL;
		else if (res->code)
			it->result = res->code;
		else if (r->sqe.op == LC_OP_GET_SIZE)
			it->result = (int64_t)res->size;
		else
			it->result = get_one(px, it, res);
	}
	protobuf_c_message_free_unpacked(rep, NULL);
out:
	px_batch_fini(&b);
	return 0;
}
