/*
 * put.c - the write path. A put reserves its place under the store lock
 * (record index, data offset, metadata offset; a new bucket or eviction when
 * needed), then writes outside the lock: the object bytes, padded to 4 KiB,
 * straight from the caller's memory when O_DIRECT alignment allows, else
 * staged through the context's registered bounce buffer; and its metadata
 * record, in the same io_uring submission. The metadata carries the data
 * CRC, so the scan after a crash drops a record whose bytes did not land.
 */
#include "dsk_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "failpoint.h"
#include "key.h"
#include "log.h"
#include "lunar.h"

static void dsk_bucket_seal(struct dsk_store *s, struct dsk_bucket *b)
{
	b->sealed = 1;
	if (s->open == b)
		s->open = NULL;
}

/* With s->mu held: a bucket with room for dlen more bytes, or NULL after
 * sealing a full one. */
static struct dsk_bucket *dsk_put_bucket(struct dsk_store *s, uint64_t dlen)
{
	struct dsk_bucket *b = s->open;

	if (b && (b->count >= s->cfg.bucket_objects ||
		  (b->count && b->data_end + dlen > s->cfg.bucket_bytes))) {
		dsk_bucket_seal(s, b);
		b = NULL;
	}
	return b;
}

/* Reserve the record's place; on success r is in the index (PENDING) and
 * holds a writer reference on its bucket. */
int dsk_put_reserve(struct dsk_store *s, struct dsk_put_plan *p, uint64_t dlen)
{
	struct dsk_rec *r = p->r;
	uint64_t need = dlen + p->mlen;
	struct dsk_bucket *b;
	int rc;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		if (dsk_index_find(&s->ix, r->name, r->tlen, dsk_rec_key(r), r->klen, r->hash)) {
			rc = LUNAR_ERR_OBJECT_ALREADY_EXISTS;
			goto out;
		}
		b = dsk_put_bucket(s, dlen);
		if (s->used + need <= s->cfg.capacity)
			break;
		pthread_mutex_unlock(&s->mu);
		rc = need <= s->cfg.capacity && !p->no_evict ? dsk_evict_for(s, need)
							     : LUNAR_ERR_NO_AVAILABLE_HANDLE;
		pthread_mutex_lock(&s->mu);
		if (rc < 0) {
			s->full_failures++;
			goto out;
		}
	}
	if (!b) {
		rc = dsk_bucket_open(s, s->next_id, &b);
		if (rc < 0) {
			s->write_failures++;
			goto out;
		}
		s->next_id++;
		b->last_use = ++s->tick;
		dsk_bucket_link(s, b);
		s->open = b;
	}
	r->idx = b->count;
	r->off = b->data_end;
	rc = dsk_bucket_rec_add(b, r);
	if (rc < 0)
		goto out;
	b->count++;
	b->data_end += dlen;
	p->moff = b->meta_end;
	b->meta_end += p->mlen;
	s->used += need;
	r->state = DSK_REC_PENDING;
	dsk_index_insert(&s->ix, r);
	b->writers++;
	b->dirty = 1;
	p->dfd = b->dfd;
	p->mfd = b->mfd;
	if (b->count >= s->cfg.bucket_objects || b->data_end >= s->cfg.bucket_bytes)
		dsk_bucket_seal(s, b);
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int dsk_put_fits(struct dsk_store *s, uint64_t need)
{
	int fits;

	pthread_mutex_lock(&s->mu);
	fits = s->used + need <= s->cfg.capacity;
	pthread_mutex_unlock(&s->mu);
	return fits;
}

/* Can the bytes go to an O_DIRECT file from the caller's memory? Every piece
 * must start on a block and all but the last be whole blocks; the last
 * one's partial block is staged. */
static int dsk_iov_aligned(const struct iovec *iov, int iovcnt)
{
	for (int i = 0; i < iovcnt; i++) {
		if ((uintptr_t)iov[i].iov_base % DSK_ALIGN)
			return 0;
		if (i + 1 < iovcnt && iov[i].iov_len % DSK_ALIGN)
			return 0;
	}
	return 1;
}

int dsk_put_check(struct dsk_io *ios, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		int64_t want = ios[i].op == DSK_IO_FSYNC ? 0 : (int64_t)ios[i].len;

		if (ios[i].res != want) {
			int err = ios[i].res < 0 ? (int)-ios[i].res : EIO;

			LC_WARN(DSK_LOG, "write fd %d at %llu: %s", ios[i].fd,
				(unsigned long long)ios[i].off, strerror(err));
			return LUNAR_ERR_FILE_WRITE_FAIL;
		}
	}
	return 0;
}

#ifdef LUNAR_FAILPOINTS
/* Test builds only (common/failpoint.h): die as on a power cut, with the
 * data written and no record (disk-crash-before-meta), or with a record of
 * which only the first 24 bytes landed, magic to length (disk-torn-meta). */
static void dsk_put_failpoints(struct dsk_ioctx *c, const struct dsk_put_plan *p,
			       struct dsk_io *ios, unsigned n)
{
	int torn = LC_FAILPOINT("disk-torn-meta");

	if (!torn && !LC_FAILPOINT("disk-crash-before-meta"))
		return;
	if (torn) {
		memset((char *)p->meta + 24, 0, p->mlen - 24);
		dsk_io_set(&ios[n++], DSK_IO_WRITE, p->mfd, p->meta, p->mlen, p->moff, -1);
	}
	dsk_io_run(c, ios, n);
	lc_failpoint_crash(torn ? "disk-torn-meta" : "disk-crash-before-meta");
}
#else
#define dsk_put_failpoints(c, p, ios, n) ((void)0)
#endif

/* Append the metadata write (and the flushes of sync_writes, chained so the
 * metadata lands only after the data is durable) and run the batch. */
static int dsk_put_finish_batch(struct dsk_ioctx *c, const struct dsk_put_plan *p,
				struct dsk_io *ios, unsigned n)
{
	int sync = c->s->cfg.sync_writes;

	dsk_put_failpoints(c, p, ios, n);
	if (sync) {
		for (unsigned i = 0; i < n; i++)
			ios[i].flags |= DSK_IO_LINK;
		dsk_io_set(&ios[n], DSK_IO_FSYNC, p->dfd, NULL, 0, 0, -1);
		ios[n++].flags = DSK_IO_LINK;
	}
	dsk_io_set(&ios[n], DSK_IO_WRITE, p->mfd, p->meta, p->mlen, p->moff, -1);
	if (sync) {
		ios[n++].flags = DSK_IO_LINK;
		dsk_io_set(&ios[n], DSK_IO_FSYNC, p->mfd, NULL, 0, 0, -1);
	}
	n++;
	dsk_io_run(c, ios, n);
	return dsk_put_check(ios, n);
}

static int dsk_put_write(struct dsk_ioctx *c, const struct dsk_put_plan *p, const struct iovec *iov,
			 int iovcnt, uint64_t len)
{
	struct dsk_io ios[LUNAR_IOV_MAX + 4];
	uint64_t off = p->r->off, pos = 0;
	unsigned n = 0;
	int rc;

	if (!c->s->direct || dsk_iov_aligned(iov, iovcnt)) {
		for (int i = 0; i < iovcnt; i++) {
			size_t l = iov[i].iov_len;

			if (c->s->direct && i + 1 == iovcnt)
				l -= l % DSK_ALIGN;
			if (l)
				dsk_io_set(&ios[n++], DSK_IO_WRITE, p->dfd, iov[i].iov_base, l,
					   off + pos, -1);
			pos += l;
		}
		if (pos < len) { /* O_DIRECT: the last partial block, zero padded */
			size_t tail = (size_t)(len - pos);

			LC_UNTRACKED_BEGIN(); /* the caller's bytes (dsk_put) */
			memcpy(c->bounce,
			       (const char *)iov[iovcnt - 1].iov_base +
				   (iov[iovcnt - 1].iov_len - tail),
			       tail);
			LC_UNTRACKED_END();
			memset((char *)c->bounce + tail, 0, DSK_ALIGN - tail);
			dsk_io_set(&ios[n++], DSK_IO_WRITE, p->dfd, c->bounce, DSK_ALIGN, off + pos,
				   c->bounce_index);
		}
		return dsk_put_finish_batch(c, p, ios, n);
	}
	/* Staged: whole bounce buffers, the last one zero padded to a block and
	 * sent with the metadata. */
	for (;;) {
		size_t chunk = len - pos > DSK_BOUNCE ? DSK_BOUNCE : (size_t)(len - pos);
		size_t padded = (size_t)DSK_PAD(chunk, DSK_ALIGN);

		LC_UNTRACKED_BEGIN(); /* the caller's bytes (dsk_put) */
		dsk_iov_to_buf(iov, iovcnt, pos, c->bounce, chunk);
		LC_UNTRACKED_END();
		memset((char *)c->bounce + chunk, 0, padded - chunk);
		dsk_io_set(&ios[0], DSK_IO_WRITE, p->dfd, c->bounce, padded, off + pos,
			   c->bounce_index);
		pos += chunk;
		if (pos == len)
			return dsk_put_finish_batch(c, p, ios, 1);
		dsk_io_run(c, ios, 1);
		rc = dsk_put_check(ios, 1);
		if (rc < 0)
			return rc;
	}
}

/* Publish or forget the record, drop the writer reference; the last writer
 * of a sealed bucket flushes it. */
void dsk_put_done(struct dsk_store *s, struct dsk_rec *r, int rc)
{
	struct dsk_bucket *b = r->b;
	int flush = 0;

	pthread_mutex_lock(&s->mu);
	if (rc == 0) {
		r->state = DSK_REC_LIVE;
	} else {
		dsk_rec_drop(s, r);
		s->write_failures++;
	}
	if (b->sealed && b->dirty && b->writers == 1) {
		b->dirty = 0;
		flush = 1;
	}
	pthread_mutex_unlock(&s->mu);
	if (flush) {
		struct dsk_ioctx *c = dsk_ctx_get(s);
		struct dsk_io ios[2];

		dsk_io_set(&ios[0], DSK_IO_FSYNC, b->dfd, NULL, 0, 0, -1);
		dsk_io_set(&ios[1], DSK_IO_FSYNC, b->mfd, NULL, 0, 0, -1);
		dsk_io_run(c, ios, 2);
		dsk_ctx_put(c);
		if (ios[0].res < 0 || ios[1].res < 0)
			LC_WARN(DSK_LOG, "flush bucket %08x failed", b->id);
	}
	pthread_mutex_lock(&s->mu);
	dsk_bucket_release(s, b, 1);
	pthread_mutex_unlock(&s->mu);
}

int dsk_put_args(const char *tenant, const char *key, const struct iovec *iov, int iovcnt,
		 uint64_t *len)
{
	int rc;

	if (!tenant || !key || !iov || iovcnt <= 0 || iovcnt > LUNAR_IOV_MAX)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = lc_tenant_check(tenant, strlen(tenant));
	if (rc < 0)
		return rc;
	rc = lc_key_check(key, strlen(key));
	if (rc < 0)
		return rc;
	*len = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len && !iov[i].iov_base)
			return LUNAR_ERR_INVALID_PARAMS;
		*len += iov[i].iov_len;
	}
	return *len ? 0 : LUNAR_ERR_INVALID_PARAMS;
}

int dsk_put(struct dsk_store *s, const char *tenant, const char *key, const struct iovec *iov,
	    int iovcnt, uint32_t crc32c, uint64_t *location)
{
	struct dsk_put_plan p = {0};
	struct dsk_ioctx *c;
	uint64_t len;
	size_t tlen, klen;
	int rc;

	rc = dsk_put_args(tenant, key, iov, iovcnt, &len);
	if (rc < 0)
		return rc;
	tlen = strlen(tenant);
	klen = strlen(key);
	p.mlen = dsk_meta_size(tlen, klen);
	p.meta = malloc(p.mlen);
	p.r = dsk_rec_alloc(tenant, tlen, key, klen);
	if (!p.meta || !p.r) {
		rc = LUNAR_ERR_INTERNAL;
		goto err_free;
	}
	p.r->len = len;
	p.r->crc = crc32c;
	rc = dsk_put_reserve(s, &p, DSK_PAD(len, DSK_ALIGN));
	if (rc < 0)
		goto err_free;
	dsk_meta_encode(p.meta, DSK_META_PUT, p.r->idx, p.r->off, len, crc32c, tenant, tlen, key,
			klen);
	if (location)
		*location = (uint64_t)p.r->b->id << 32 | p.r->idx;
	c = dsk_ctx_get(s);
	rc = dsk_put_write(c, &p, iov, iovcnt, len);
	dsk_ctx_put(c);
	dsk_put_done(s, p.r, rc);
	free(p.meta);
	if (rc == 0)
		dsk_evict_watermark(s);
	return rc;

err_free:
	free(p.r);
	free(p.meta);
	return rc;
}
