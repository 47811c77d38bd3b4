/*
 * ops_get.c - the lookups: get, get-size, exists and prefix match, each of
 * which takes a read lease. A key whose lease the proxy still holds is
 * served from the lease cache with no master call; the others take one
 * BatchGetReplicaList for the whole request, whose lists (and leases) the
 * cache keeps for the next lookup, whichever kind it is. Each value is read
 * from its best replica (our own segment first) straight into the client's
 * memory, checksummed on the way, and reported only if its CRC32C matches
 * and the lease still held when the transfer ended. A mismatch through a
 * cached list drops the entry and asks the master again. A get of several
 * keys reads its values together, as one engine batch (each from its first
 * MEMORY replica); a value that read fails goes through the replica order
 * alone.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine/engine.h"
#include "lunar.h"
#include "ops.h"

/* The first bytes of the item's destination that hold size bytes. */
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

/*
 * Read the value from one replica into iov: 0 when its bytes are the
 * value's (CRC32C as the master recorded), else a code. A local LOCAL_DISK
 * record is read straight into iov (the store checks its CRC, we check
 * that it is a copy of this value); a remote one through its owner's data
 * port.
 */
static int read_replica(struct px_proxy *px, const char *tenant, const struct px_item *it,
			const struct px_cached *e, const struct px_cached_replica *rp, int local,
			const struct iovec *iov, int iovcnt)
{
	uint32_t crc = 0;
	int64_t n;

	const struct eng_cap *cap = rp->has_cap ? &rp->cap : NULL;

	if (rp->type == LUNAR__REPLICA_TYPE__MEMORY) {
		if (eng_xfer(px->engine, rp->endpoint, px_item_read_dir(it), rp->offset, iov, iovcnt,
			     cap, &crc))
			return LUNAR_ERR_TRANSFER_FAIL;
		return crc == e->crc ? 0 : LUNAR_ERR_CHECKSUM_MISMATCH;
	}
	if (local)
		n = px_disk_get(px, tenant, it->key, iov, iovcnt, e->crc);
	else
		n = eng_xfer_disk(px->engine, rp->endpoint, tenant, it->key, iov, iovcnt, cap, &crc);
	if (n < 0)
		return (int)n;
	return n == (int64_t)e->size && (local || crc == e->crc) ? 0 : LUNAR_ERR_CHECKSUM_MISMATCH;
}

/* Read one value from the replicas of e: local MEMORY, remote MEMORY, local
 * LOCAL_DISK, remote LOCAL_DISK, skipping peers the request gave up on (a
 * transfer there failed). Size or a code; OBJECT_NOT_FOUND when every
 * replica tried was gone. */
static int64_t read_value(struct px_proxy *px, const char *tenant, const struct px_item *it,
			  const struct px_cached *e, struct px_down *down)
{
	struct iovec iov[LUNAR_IOV_MAX];
	int iovcnt, mismatch = 0, tried = 0, missing = 0;

	if (e->size > it->total)
		return LUNAR_ERR_BUFFER_OVERFLOW;
	iovcnt = trim_iov(it, e->size, iov);
	for (int pass = 0; pass < 4; pass++) {
		int type = pass < 2 ? LUNAR__REPLICA_TYPE__MEMORY : LUNAR__REPLICA_TYPE__LOCAL_DISK;

		for (unsigned k = 0; k < e->nrep; k++) {
			const struct px_cached_replica *rp = &e->rep[k];
			int local = !strcmp(rp->endpoint, px->endpoint), rc;

			if (local != (pass % 2 == 0) || rp->type != type || rp->length != e->size)
				continue;
			tried++;
			if (!local && px_down_has(down, rp->endpoint))
				continue;
			rc = read_replica(px, tenant, it, e, rp, local, iov, iovcnt);
			if (rc == LUNAR_ERR_TRANSFER_FAIL && !local)
				px_down_add(down, rp->endpoint);
			missing += rc == LUNAR_ERR_OBJECT_NOT_FOUND;
			if (rc == LUNAR_ERR_CHECKSUM_MISMATCH) {
				PX_COUNT(px, checksum_failures, 1);
				mismatch = 1;
			}
			if (!rc)
				return lc_now_ms() > e->deadline_ms ? LUNAR_ERR_LEASE_EXPIRED
								    : (int64_t)e->size;
		}
	}
	if (mismatch)
		return LUNAR_ERR_CHECKSUM_MISMATCH;
	return tried && missing < tried ? LUNAR_ERR_TRANSFER_FAIL : LUNAR_ERR_OBJECT_NOT_FOUND;
}

/* How much of a local value to ask the cache for ahead of its copy; past
 * this the hardware's own prefetching keeps up. */
#define PX_PREFETCH_MAX (16u * 1024)

/* Start loading the first bytes of e's replica in our segment, if it has
 * one: a value read right after its replica list arrives is cold, and the
 * lease cache is updated meanwhile. */
static void prefetch_local(const struct px_proxy *px, const struct px_cached *e)
{
	for (unsigned k = 0; k < e->nrep; k++) {
		const struct px_cached_replica *rp = &e->rep[k];
		const char *p = (const char *)px->segment + rp->offset;
		uint64_t len = rp->length < PX_PREFETCH_MAX ? rp->length : PX_PREFETCH_MAX;

		if (rp->type != LUNAR__REPLICA_TYPE__MEMORY || !px->segment ||
		    strcmp(rp->endpoint, px->endpoint) || rp->offset > px->cfg.segment_size ||
		    rp->length > px->cfg.segment_size - rp->offset)
			continue;
		for (uint64_t off = 0; off < len; off += 64)
			__builtin_prefetch(p + off, 0, 2);
		return;
	}
}

static int64_t serve(struct px_proxy *px, const struct px_req *r, const struct px_item *it,
		     const struct px_cached *e, struct px_down *down)
{
	switch (r->sqe.op) {
	case LC_OP_GET: return read_value(px, r->s->tenant, it, e, down);
	case LC_OP_GET_SIZE: return (int64_t)e->size;
	default: return 1; /* exists, prefix match */
	}
}

/* A value of a batched get: its item and its replica list. */
struct get_one {
	uint32_t item;
	int done; /* read by the batch, result set */
	struct px_cached e;
};

/* The replica read_value would read first: a local MEMORY one, else the
 * first remote MEMORY one not given up on; -1 when none. */
static int first_memory(const struct px_proxy *px, const struct px_cached *e,
			const struct px_down *down)
{
	int best = -1;

	for (unsigned k = 0; k < e->nrep; k++) {
		const struct px_cached_replica *rp = &e->rep[k];

		if (rp->type != LUNAR__REPLICA_TYPE__MEMORY || rp->length != e->size)
			continue;
		if (!strcmp(rp->endpoint, px->endpoint))
			return (int)k;
		if (best < 0 && !px_down_has(down, rp->endpoint))
			best = (int)k;
	}
	return best;
}

/* Add the read of g's value from its first MEMORY replica to ops (iov: its
 * LUNAR_IOV_MAX slots); 0 when it has none to try this way. */
static int plan_read(struct px_proxy *px, const struct px_req *r, struct get_one *g,
		     const struct px_down *down, struct iovec *iov, struct eng_op *op)
{
	const struct px_item *it = &r->items[g->item];
	int k = first_memory(px, &g->e, down), iovcnt;

	if (k < 0 || g->e.size > it->total)
		return 0;
	iovcnt = trim_iov(it, g->e.size, iov);
	if (!iovcnt)
		return 0;
	*op = (struct eng_op){
	    .endpoint = g->e.rep[k].endpoint,
	    .dir = px_item_read_dir(it),
	    .off = g->e.rep[k].offset,
	    .iov = iov,
	    .iovcnt = iovcnt,
	    .cap = g->e.rep[k].has_cap ? &g->e.rep[k].cap : NULL,
	    .want_crc = 1,
	    .user = g,
	};
	return 1;
}

/*
 * Read the values of g[0..n) together: one engine batch of each value's
 * first MEMORY replica, so the reads run at once over several connections
 * and I/O threads; a value whose read failed, or whose bytes are not its
 * CRC32C, then goes through read_value's replica order as alone.
 */
static void read_batch(struct px_proxy *px, const struct px_req *r, struct get_one *g, size_t n,
		       struct px_down *down)
{
	struct eng_op *ops = calloc(n, sizeof(*ops));
	struct iovec *iov = calloc(n * LUNAR_IOV_MAX, sizeof(*iov));
	int m = 0;

	for (size_t i = 0; ops && iov && i < n; i++)
		m += plan_read(px, r, &g[i], down, &iov[i * LUNAR_IOV_MAX], &ops[m]);
	eng_xfer_batch(px->engine, ops, m);
	for (int j = 0; j < m; j++) {
		struct get_one *one = ops[j].user;

		if (!ops[j].result && ops[j].crc == one->e.crc) {
			r->items[one->item].result = lc_now_ms() > one->e.deadline_ms
							 ? LUNAR_ERR_LEASE_EXPIRED
							 : (int64_t)one->e.size;
			one->done = 1;
		} else if (ops[j].result && strcmp(ops[j].endpoint, px->endpoint)) {
			px_down_add(down, ops[j].endpoint);
		}
	}
	free(ops);
	free(iov);
}

/* The values of a get of several keys, read together once listed. */
struct get_batch {
	struct get_one *g; /* NULL: each value is read as it is listed */
	size_t n;
};

static void batch_init(struct get_batch *gb, const struct px_req *r)
{
	gb->n = 0;
	gb->g = r->sqe.op == LC_OP_GET && r->count > 1 ? calloc(r->count, sizeof(*gb->g)) : NULL;
}

/* Defer the read of item's value (list e) to batch_run: 1, or 0 to read
 * it now (not a batched get). */
static int batch_add(struct get_batch *gb, uint32_t item, const struct px_cached *e)
{
	if (!gb->g)
		return 0;
	gb->g[gb->n].item = item;
	gb->g[gb->n].e = *e;
	gb->n++;
	return 1;
}

/* Read every deferred value; those the batch did not read, one at a time. */
static void batch_run(struct px_proxy *px, const struct px_req *r, struct get_batch *gb,
		      struct px_down *down)
{
	if (gb->n)
		read_batch(px, r, gb->g, gb->n, down);
	for (size_t i = 0; i < gb->n; i++) {
		struct get_one *g = &gb->g[i];

		if (!g->done)
			r->items[g->item].result = serve(px, r, &r->items[g->item], &g->e, down);
	}
}

/* Exists and prefix match only ask whether each key is there to read. */
static bool asks_existence(const struct px_req *r)
{
	return r->sqe.op == LC_OP_EXISTS || r->sqe.op == LC_OP_PREFIX_MATCH;
}

/* The result of a key the master has no list of: for a question of
 * existence, no object ready to read is a plain no. */
static int64_t unlisted(const struct px_req *r, int code)
{
	if (asks_existence(r) &&
	    (code == LUNAR_ERR_OBJECT_NOT_FOUND || code == LUNAR_ERR_REPLICA_IS_NOT_READY))
		return 0;
	return code;
}

/* A value read through a cached list that failed: forget the list, and
 * leave the key pending (the master is asked). */
static void cached_failed(struct px_proxy *px, const struct px_req *r, struct px_item *it)
{
	if (it->result == LUNAR_ERR_CHECKSUM_MISMATCH || it->result == LUNAR_ERR_TRANSFER_FAIL ||
	    it->result == LUNAR_ERR_OBJECT_NOT_FOUND) {
		px_lease_cache_drop(px->leases, r->s->tenant, it->key);
		it->result = 0; /* ask the master */
	}
}

/* Serve what the lease cache can; leave misses (and stale hits) pending. */
static void get_cached(struct px_proxy *px, struct px_req *r, struct px_down *down)
{
	uint64_t now = lc_now_ms();
	struct px_read rd = px_read_by(px, r->s, now);
	struct get_batch gb;
	struct px_cached e;

	batch_init(&gb, r);
	for (uint32_t i = 0; i < r->count; i++) {
		struct px_item *it = &r->items[i];

		if (it->result || !px_lease_cache_get(px->leases, r->s->tenant, it->key, now,
						      px_lease_margin_ms(px), &rd, &e))
			continue;
		PX_COUNT(px, lease_hits, 1);
		if (batch_add(&gb, i, &e))
			continue;
		it->result = serve(px, r, it, &e, down);
		cached_failed(px, r, it);
	}
	batch_run(px, r, &gb, down);
	for (size_t i = 0; i < gb.n; i++)
		cached_failed(px, r, &r->items[gb.g[i].item]);
	free(gb.g);
}

static void get_fresh(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		      struct px_down *down)
{
	const Lunar__BatchGetReplicaListReply *rl;
	uint64_t sent = lc_now_ms();
	struct get_batch gb;
	struct px_read rd;
	ProtobufCMessage *rep;
	int rc;

	rc = px_batch_keys_call(px, r->s->tenant, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, b->keys,
				b->n, 0, r->s->client_id, NULL, &rep);
	if (rc) {
		px_batch_fail(r, b, rc);
		return;
	}
	rl = (const Lunar__BatchGetReplicaListReply *)rep;
	batch_init(&gb, r);
	atomic_store(&px->lease_ttl_ms, rl->lease_ttl_ms);
	rd = px_read_by(px, r->s, sent);
	PX_COUNT(px, lease_misses, b->n);
	for (size_t i = 0; i < b->n; i++) {
		struct px_item *it = &r->items[b->idx[i]];
		const Lunar__GetReplicaListResult *res = i < rl->n_results ? rl->results[i] : NULL;
		struct px_cached e;

		if (!res || res->code) {
			it->result = res ? unlisted(r, res->code) : LUNAR_ERR_PROTOCOL;
			continue;
		}
		/* The lease runs from when we asked, not from when we heard. A
		 * list the cache cannot hold still answers whether it exists. */
		if (px_lease_cache_fill(res, sent + rl->lease_ttl_ms, r->s->client_id, &e)) {
			it->result = asks_existence(r) ? 1 : LUNAR_ERR_INTERNAL;
			continue;
		}
		if (r->sqe.op == LC_OP_GET)
			prefetch_local(px, &e);
		if (rl->lease_ttl_ms)
			px_lease_cache_put(px->leases, r->s->tenant, it->key, &e, &rd);
		if (!batch_add(&gb, b->idx[i], &e))
			it->result = serve(px, r, it, &e, down);
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	batch_run(px, r, &gb, down);
	free(gb.g);
}

int64_t px_run_get(struct px_proxy *px, struct px_req *r)
{
	struct px_down down = {0};
	struct px_batch b;
	int64_t leading = 0;

	get_cached(px, r, &down);
	if (px_batch_collect(r, &b))
		return LUNAR_ERR_INTERNAL;
	if (b.n)
		get_fresh(px, r, &b, &down);
	px_batch_fini(&b);
	if (r->sqe.op != LC_OP_PREFIX_MATCH)
		return 0;
	while (leading < r->count && r->items[leading].result == 1)
		leading++;
	return leading;
}
