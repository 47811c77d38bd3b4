/*
 * ops_get.c - the lookups: get, get-size, exists and prefix match, each of
 * which takes a read lease. A key whose lease the proxy still holds is
 * served from the lease cache with no master call; the others take one
 * BatchGetReplicaList for the whole request, whose lists (and leases) the
 * cache keeps for the next lookup, whichever kind it is. Each value is read
 * from its best replica (our own segment first) straight into the client's
 * memory, checksummed on the way, and reported only if its CRC32C matches
 * and the lease still held when the transfer ended. A mismatch through a
 * cached list drops the entry and asks the master again. In a request of
 * several keys the reads are held and run together at the end of each
 * pass: those from a MEMORY replica in one eng_xfer_batch (on as many
 * connections at once), those from our SSD in one dsk_get_batch (such a
 * read is not bound by the lease, see read_value); a held read that fails
 * is done again the one-by-one way.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "disk/disk.h"
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
 * A new attempt at item it: its slot's landed word (if it has one) names
 * the request's next gen with no bytes, so that a waiter drops what it
 * copied of an earlier attempt, and says whether this one tells its bytes
 * as they land (a remote MEMORY read). Returns the word, the base the
 * engine adds the landed bytes to.
 */
static uint64_t land_begin(struct px_item *it, int tells)
{
	uint64_t w;

	if (!it->landed)
		return 0;
	/* 1, 2, ...: never 0, the client's "nothing yet". A request makes a
	 * handful of attempts, far below 2^24. */
	w = lc_landed_pack(++it->land_gen, tells, 0);
	lc_store_release(it->landed, w);
	return w;
}

/* The transfer reading MEMORY replica rp into iov, its CRC32C computed. */
static struct eng_op replica_read(const struct px_item *it, const struct px_cached_replica *rp,
				  const struct iovec *iov, int iovcnt)
{
	return (struct eng_op){
	    .endpoint = rp->endpoint,
	    .dir = px_item_read_dir(it),
	    .off = rp->offset,
	    .iov = iov,
	    .iovcnt = iovcnt,
	    .cap = rp->has_cap ? &rp->cap : NULL,
	    .want_crc = 1,
	};
}

/*
 * Read the value from one replica into iov: 0 when its bytes are the
 * value's (CRC32C as the master recorded), else a code (UNAUTHORIZED: the
 * owner refused the list's grant, see eng_xfer). A local LOCAL_DISK
 * record is read straight into iov (the store checks its CRC, we check
 * that it is a copy of this value); a remote one through its owner's data
 * port. land: the attempt's landed word (land_begin), which a remote
 * MEMORY read raises as its bytes land.
 */
static int read_replica(struct px_proxy *px, const char *tenant, const struct px_item *it,
			const struct px_cached *e, const struct px_cached_replica *rp, int local,
			const struct iovec *iov, int iovcnt, uint64_t land)
{
	const struct eng_cap *cap = rp->has_cap ? &rp->cap : NULL;
	uint32_t crc = 0;
	int64_t n;

	if (rp->type == LUNAR__REPLICA_TYPE__MEMORY) {
		struct eng_op op = replica_read(it, rp, iov, iovcnt);

		if (land && lc_landed_tells(land)) {
			op.landed = it->landed;
			op.landed_base = land;
		}
		eng_xfer_batch(px->engine, &op, 1);
		if (op.result)
			return op.result == LUNAR_ERR_UNAUTHORIZED ? op.result
								   : LUNAR_ERR_TRANSFER_FAIL;
		return op.crc == e->crc ? 0 : LUNAR_ERR_CHECKSUM_MISMATCH;
	}
	if (local)
		n = px_disk_get(px, tenant, it->key, iov, iovcnt, e->crc);
	else
		n = eng_xfer_disk(px->engine, rp->endpoint, tenant, it->key, iov, iovcnt, cap,
				  &crc);
	if (n < 0)
		return (int)n;
	return n == (int64_t)e->size && (local || crc == e->crc) ? 0 : LUNAR_ERR_CHECKSUM_MISMATCH;
}

/* A result held back for the request's batch of SSD reads. */
#define PX_DEFERRED INT64_MAX

/* The request's reads of values whose best replica is our SSD tier. */
struct px_dreads {
	uint32_t n;
	uint32_t *idx;		/* the items, in r->items */
	struct px_cached *e;	/* their lists */
	struct dsk_get_item *v; /* their reads */
};

/* Hold item i's read of e from our SSD, into its one piece iov, for the
 * batch; false when it cannot be (no room: read it now). */
static bool defer_read(struct px_dreads *dr, uint32_t count, uint32_t i, const char *tenant,
		       const struct px_item *it, const struct px_cached *e, const struct iovec *iov)
{
	if (!dr->idx && !dr->e && !dr->v) { /* once: a part that failed stays NULL */
		dr->idx = calloc(count, sizeof(*dr->idx));
		dr->e = calloc(count, sizeof(*dr->e));
		dr->v = calloc(count, sizeof(*dr->v));
	}
	if (!dr->idx || !dr->e || !dr->v || dr->n >= count)
		return false;
	dr->idx[dr->n] = i;
	dr->e[dr->n] = *e;
	dr->v[dr->n++] = (struct dsk_get_item){
	    .tenant = tenant, .key = it->key, .buf = iov->iov_base, .cap = iov->iov_len};
	return true;
}

static void dreads_fini(struct px_dreads *dr)
{
	free(dr->idx);
	free(dr->e);
	free(dr->v);
}

/* The request's reads of values from a MEMORY replica, run at once. */
struct px_mreads {
	uint32_t n;
	uint32_t *idx;			    /* the items, in r->items */
	struct px_cached *e;		    /* their lists (ops[k].cap points into e[k]) */
	struct eng_op *ops;		    /* their transfers */
	struct iovec (*iov)[LUNAR_IOV_MAX]; /* their destinations, trimmed */
};

/* Hold item i's read of replica rp of e into iov[0..iovcnt) for the batch;
 * false when it cannot be (no room: read it now). */
static bool hold_xfer(struct px_mreads *mr, uint32_t count, uint32_t i, const struct px_item *it,
		      const struct px_cached *e, const struct px_cached_replica *rp,
		      const struct iovec *iov, int iovcnt)
{
	uint32_t k = mr->n;

	if (!mr->idx && !mr->e && !mr->ops && !mr->iov) { /* once, as defer_read's */
		mr->idx = calloc(count, sizeof(*mr->idx));
		mr->e = calloc(count, sizeof(*mr->e));
		mr->ops = calloc(count, sizeof(*mr->ops));
		mr->iov = calloc(count, sizeof(*mr->iov));
	}
	if (!mr->idx || !mr->e || !mr->ops || !mr->iov || k >= count)
		return false;
	mr->idx[k] = i;
	mr->e[k] = *e;
	memcpy(mr->iov[k], iov, (size_t)iovcnt * sizeof(*iov));
	rp = &mr->e[k].rep[rp - e->rep];
	mr->ops[k] = replica_read(it, rp, mr->iov[k], iovcnt);
	mr->n++;
	return true;
}

static void mreads_fini(struct px_mreads *mr)
{
	free(mr->idx);
	free(mr->e);
	free(mr->ops);
	free(mr->iov);
}

/* Where read_value may hold a read for the request's batches. */
struct px_defer {
	struct px_dreads *dr;
	struct px_mreads *mr;
	uint32_t count, i;
};

/*
 * Read one value from the replicas of e: local MEMORY, remote MEMORY, local
 * LOCAL_DISK, remote LOCAL_DISK, skipping peers the request gave up on (a
 * transfer there failed). Size or a code; OBJECT_NOT_FOUND when every
 * replica tried was gone; PX_DEFERRED when df took the first read (a
 * MEMORY replica's, or the local SSD's). A peer whose transfer failed is
 * skipped for the rest of the request (down); one that refused the list's
 * grant is not: a list asked again carries a grant it takes.
 * The lease bounds reads of MEMORY replicas only: a range in a segment can
 * be reused once the lease ends, but a disk record is never rewritten in
 * place (its bucket goes only after the reads on it end), and its bytes are
 * checked against the value's CRC32C, so a slow disk read of a replica
 * still listed returns the value's bytes or an error.
 */
static int64_t read_value(struct px_proxy *px, const char *tenant, struct px_item *it,
			  const struct px_cached *e, struct px_down *down,
			  const struct px_defer *df)
{
	struct iovec iov[LUNAR_IOV_MAX];
	int iovcnt, mismatch = 0, tried = 0, missing = 0;
	uint64_t land;

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
			/* Every attempt a new gen, held ones too: bytes told of an
			 * earlier one are not this one's. */
			land =
			    land_begin(it, type == LUNAR__REPLICA_TYPE__MEMORY && !local &&
					       eng_engine_tells_landed(px->engine, rp->endpoint));
			if (df && df->mr && type == LUNAR__REPLICA_TYPE__MEMORY &&
			    hold_xfer(df->mr, df->count, df->i, it, e, rp, iov, iovcnt))
				return PX_DEFERRED;
			if (df && df->dr && local && type == LUNAR__REPLICA_TYPE__LOCAL_DISK &&
			    iovcnt == 1 && defer_read(df->dr, df->count, df->i, tenant, it, e, iov))
				return PX_DEFERRED;
			rc = read_replica(px, tenant, it, e, rp, local, iov, iovcnt, land);
			if (rc == LUNAR_ERR_TRANSFER_FAIL && !local)
				px_down_add(down, rp->endpoint);
			missing += rc == LUNAR_ERR_OBJECT_NOT_FOUND;
			if (rc == LUNAR_ERR_CHECKSUM_MISMATCH) {
				PX_COUNT(px, checksum_failures, 1);
				mismatch = 1;
			}
			if (!rc)
				return type == LUNAR__REPLICA_TYPE__MEMORY &&
					       lc_now_ms() > e->deadline_ms
					   ? LUNAR_ERR_LEASE_EXPIRED
					   : (int64_t)e->size;
		}
	}
	/* bytes of a value committed beside its write, still on their way:
	 * not there yet, as for a put not yet committed */
	if (mismatch)
		return e->landing ? LUNAR_ERR_OBJECT_NOT_FOUND : LUNAR_ERR_CHECKSUM_MISMATCH;
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

/* The reads a request holds for its batches. */
struct px_held {
	struct px_dreads dr; /* from our SSD */
	struct px_mreads mr; /* from MEMORY replicas */
};

static void held_fini(struct px_held *h)
{
	dreads_fini(&h->dr);
	mreads_fini(&h->mr);
}

static int64_t serve(struct px_proxy *px, const struct px_req *r, struct px_item *it,
		     const struct px_cached *e, struct px_down *down, struct px_held *h)
{
	/* A single read runs at once: no batch to wait for. */
	struct px_defer df = {px->disk ? &h->dr : NULL, r->count > 1 ? &h->mr : NULL, r->count,
			      (uint32_t)(it - r->items)};

	switch (r->sqe.op) {
	case LC_OP_GET:
		return read_value(px, r->s->tenant, it, e, down, df.dr || df.mr ? &df : NULL);
	case LC_OP_GET_SIZE: return (int64_t)e->size;
	default: return 1; /* exists, prefix match */
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

/* Whether a read through a cached list should ask the master again. */
static bool stale_hit(int64_t result)
{
	return result == LUNAR_ERR_CHECKSUM_MISMATCH || result == LUNAR_ERR_TRANSFER_FAIL ||
	       result == LUNAR_ERR_OBJECT_NOT_FOUND;
}

/* After a read through a cached list: when that list proved stale, forget
 * it and leave the item to ask the master. */
static void drop_if_stale(struct px_proxy *px, struct px_req *r, struct px_item *it)
{
	if (stale_hit(it->result)) {
		px_lease_cache_drop(px->leases, r->s->tenant, it->key);
		it->result = 0; /* ask the master */
	}
}

/* Item it's result once its held read ended (ok: its bytes are e's value):
 * a read that failed is done again the one-by-one way (other replicas, and
 * the failure reported). Through cached lists (cached), a failure leaves
 * the item to ask the master. */
static void held_done(struct px_proxy *px, struct px_req *r, struct px_item *it,
		      const struct px_cached *e, struct px_down *down, bool cached, bool ok)
{
	it->result = ok ? (int64_t)e->size : read_value(px, r->s->tenant, it, e, down, NULL);
	if (cached)
		drop_if_stale(px, r, it);
}

/* The held SSD reads, in one batch. */
static void dreads_flush(struct px_proxy *px, struct px_req *r, struct px_dreads *dr,
			 struct px_down *down, bool cached)
{
	px_disk_get_batch(px, dr->v, dr->n);
	for (uint32_t k = 0; k < dr->n; k++) {
		const struct px_cached *e = &dr->e[k];
		const struct dsk_get_item *v = &dr->v[k];

		held_done(px, r, &r->items[dr->idx[k]], e, down, cached,
			  v->res == (int64_t)e->size && v->crc32c == e->crc);
	}
	dr->n = 0;
}

/* The held MEMORY reads, at once; each as read_replica and read_value
 * judge one: its CRC32C, then its lease. */
static void mreads_flush(struct px_proxy *px, struct px_req *r, struct px_mreads *mr,
			 struct px_down *down, bool cached)
{
	eng_xfer_batch(px->engine, mr->ops, (int)mr->n);
	for (uint32_t k = 0; k < mr->n; k++) {
		struct px_item *it = &r->items[mr->idx[k]];
		const struct px_cached *e = &mr->e[k];
		const struct eng_op *op = &mr->ops[k];

		if (op->result && op->result != LUNAR_ERR_UNAUTHORIZED &&
		    strcmp(op->endpoint, px->endpoint))
			px_down_add(down, op->endpoint);
		if (!op->result && op->crc != e->crc)
			PX_COUNT(px, checksum_failures, 1);
		if (!op->result && op->crc == e->crc && lc_now_ms() > e->deadline_ms)
			it->result = LUNAR_ERR_LEASE_EXPIRED;
		else
			held_done(px, r, it, e, down, cached, !op->result && op->crc == e->crc);
	}
	mr->n = 0;
}

/* Run the reads held in this pass. */
static void held_flush(struct px_proxy *px, struct px_req *r, struct px_held *h,
		       struct px_down *down, bool cached)
{
	if (h->mr.n)
		mreads_flush(px, r, &h->mr, down, cached);
	if (h->dr.n)
		dreads_flush(px, r, &h->dr, down, cached);
}

/* Serve what the lease cache can; leave misses (and stale hits) pending. */
static void get_cached(struct px_proxy *px, struct px_req *r, struct px_down *down,
		       struct px_held *h)
{
	uint64_t now = lc_now_ms();
	struct px_read rd = px_read_by(px, r->s, now);
	struct px_cached e;

	for (uint32_t i = 0; i < r->count; i++) {
		struct px_item *it = &r->items[i];

		if (it->result || !px_lease_cache_get(px->leases, r->s->tenant, it->key, now,
						      px_lease_margin_ms(px), &rd, &e))
			continue;
		PX_COUNT(px, lease_hits, 1);
		it->result = serve(px, r, it, &e, down, h);
		drop_if_stale(px, r, it);
	}
	held_flush(px, r, h, down, true);
}

static void get_fresh(struct px_proxy *px, struct px_req *r, const struct px_batch *b,
		      struct px_down *down, struct px_held *h)
{
	const Lunar__BatchGetReplicaListReply *rl;
	uint64_t sent = lc_now_ms(), mark = px_lease_cache_mark(px->leases);
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
	atomic_store(&px->lease_ttl_ms, rl->lease_ttl_ms);
	rd = px_read_by(px, r->s, sent);
	rd.mark = mark;
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
		it->result = serve(px, r, it, &e, down, h);
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	held_flush(px, r, h, down, false);
}

int64_t px_run_get(struct px_proxy *px, struct px_req *r)
{
	struct px_down down = {0};
	struct px_held h = {0};
	struct px_batch b;
	int64_t leading = 0;

	if (px->cfg.debug_get_delay_ms)
		px_debug_hold(r->s, px->cfg.debug_get_delay_ms);
	/* Every key looked up is leased: within --max-client-leases only. */
	for (uint32_t i = 0; i < r->count; i++) {
		struct px_item *it = &r->items[i];

		if (it->result || !(it->result = px_lease_cap_take(px, r->s, it->key, it->key_len)))
			continue;
		if (it->result == LUNAR_ERR_BUSY) {
			PX_COUNT(px, busy, 1);
			PX_COUNT(px, lease_cap_busy, 1);
		}
	}
	get_cached(px, r, &down, &h);
	if (px_batch_collect(r, &b)) {
		held_fini(&h);
		return LUNAR_ERR_INTERNAL;
	}
	if (b.n)
		get_fresh(px, r, &b, &down, &h);
	px_batch_fini(&b);
	held_fini(&h);
	if (r->sqe.op != LC_OP_PREFIX_MATCH)
		return 0;
	while (leading < r->count && r->items[leading].result == 1)
		leading++;
	return leading;
}
