/*
 * get.c - the read path: look the record up and pin its bucket under the
 * store lock, read outside it (into the caller's memory when O_DIRECT
 * alignment allows or the file is buffered, else through the bounce buffer),
 * check the CRC32C, then unpin. A record whose bytes are short or corrupt is
 * dropped from the index so it is never served.
 */
#include "dsk_int.h"

#include <errno.h>
#include <string.h>

#include "log.h"
#include "lunar.h"

/* Direct reads need every piece used to start on a block, and all but the
 * last piece used to be whole blocks. */
static int dsk_get_direct_ok(const struct iovec *iov, int iovcnt, uint64_t len)
{
	for (int i = 0; i < iovcnt && len; i++) {
		uint64_t n = iov[i].iov_len < len ? iov[i].iov_len : len;

		if ((uintptr_t)iov[i].iov_base % DSK_ALIGN || (n % DSK_ALIGN && n != len))
			return 0;
		len -= n;
	}
	return 1;
}

static uint32_t dsk_iov_crc(const struct iovec *iov, int iovcnt, uint64_t len)
{
	uint32_t h = 0;

	for (int i = 0; i < iovcnt && len; i++) {
		uint64_t n = iov[i].iov_len < len ? iov[i].iov_len : len;

		h = lc_crc32c(h, iov[i].iov_base, n);
		len -= n;
	}
	return h;
}

/* Read into the caller's pieces; an O_DIRECT partial last block goes
 * through the bounce buffer. */
static int dsk_get_into(struct dsk_ioctx *c, const struct dsk_get_plan *p, const struct iovec *iov,
			int iovcnt)
{
	struct dsk_io ios[LUNAR_IOV_MAX + 1];
	uint64_t pos = 0, left = p->len;
	unsigned n = 0;
	size_t tail = 0;
	void *tail_dst = NULL;

	for (int i = 0; i < iovcnt && left; i++) {
		uint64_t l = iov[i].iov_len < left ? iov[i].iov_len : left;
		uint64_t whole = c->s->direct ? l - l % DSK_ALIGN : l;

		if (whole)
			dsk_io_set(&ios[n++], DSK_IO_READ, p->fd, iov[i].iov_base, whole,
				   p->off + pos, -1);
		if (whole < l) {
			tail = (size_t)(l - whole);
			tail_dst = (char *)iov[i].iov_base + whole;
			dsk_io_set(&ios[n++], DSK_IO_READ, p->fd, c->bounce, DSK_ALIGN,
				   p->off + pos + whole, c->bounce_index);
		}
		pos += l;
		left -= l;
	}
	dsk_io_run(c, ios, n);
	for (unsigned i = 0; i < n; i++) {
		size_t want = ios[i].buf == c->bounce ? tail : ios[i].len;

		if (ios[i].res < 0) {
			LC_WARN(DSK_LOG, "read fd %d at %llu: %s", p->fd,
				(unsigned long long)ios[i].off, strerror((int)-ios[i].res));
			return LUNAR_ERR_FILE_READ_FAIL;
		}
		if ((uint64_t)ios[i].res < want)
			return LUNAR_ERR_OBJECT_NOT_FOUND; /* truncated file */
	}
	if (tail)
		memcpy(tail_dst, c->bounce, tail);
	return dsk_iov_crc(iov, iovcnt, p->len) == p->crc ? 0 : LUNAR_ERR_CHECKSUM_MISMATCH;
}

int dsk_get_read(struct dsk_ioctx *c, const struct dsk_get_plan *p, const struct iovec *iov,
		 int iovcnt)
{
	uint32_t crc;
	int rc;

	if (iovcnt <= LUNAR_IOV_MAX && (!c->s->direct || dsk_get_direct_ok(iov, iovcnt, p->len)))
		return dsk_get_into(c, p, iov, iovcnt);
	rc = dsk_read_crc(c, p->fd, p->off, p->len, iov, iovcnt, &crc);
	if (rc < 0)
		return rc;
	return crc == p->crc ? 0 : LUNAR_ERR_CHECKSUM_MISMATCH;
}

void dsk_get_failed(struct dsk_store *s, struct dsk_bucket *b, uint32_t idx, int rc)
{
	struct dsk_rec *r;

	if (rc == LUNAR_ERR_CHECKSUM_MISMATCH)
		s->checksum_failures++;
	else
		s->read_failures++;
	if (rc == LUNAR_ERR_FILE_READ_FAIL || idx >= b->recs_cap)
		return;
	r = b->recs[idx];
	if (r && r->state == DSK_REC_LIVE) {
		LC_WARN(DSK_LOG, "bucket %08x record %u: %s, dropped", b->id, idx,
			rc == LUNAR_ERR_CHECKSUM_MISMATCH ? "checksum mismatch" : "short file");
		dsk_rec_drop(s, r);
	}
}

int64_t dsk_get(struct dsk_store *s, const char *tenant, const char *key, const struct iovec *iov,
		int iovcnt, struct dsk_record *rec)
{
	struct dsk_get_plan p;
	struct dsk_bucket *b;
	struct dsk_ioctx *c;
	struct dsk_rec *r;
	uint64_t cap = 0;
	size_t tlen, klen;
	uint32_t idx;
	int rc;

	if (!s || !tenant || !key || (iovcnt && !iov) || iovcnt < 0)
		return LUNAR_ERR_INVALID_PARAMS;
	for (int i = 0; i < iovcnt; i++)
		cap += iov[i].iov_len;
	tlen = strlen(tenant);
	klen = strlen(key);
	pthread_mutex_lock(&s->mu);
	r = dsk_index_find(&s->ix, tenant, tlen, key, klen,
			   dsk_index_hash(tenant, tlen, key, klen));
	if (!r || r->state != DSK_REC_LIVE) {
		pthread_mutex_unlock(&s->mu);
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	}
	b = r->b;
	idx = r->idx;
	if (rec)
		*rec = (struct dsk_record){.tenant = tenant,
					   .key = key,
					   .length = r->len,
					   .crc32c = r->crc,
					   .location = (uint64_t)b->id << 32 | idx};
	if (cap < r->len) {
		pthread_mutex_unlock(&s->mu);
		return LUNAR_ERR_BUFFER_OVERFLOW;
	}
	p = (struct dsk_get_plan){.fd = b->dfd, .off = r->off, .len = r->len, .crc = r->crc};
	b->readers++;
	b->last_use = ++s->tick;
	r->ref = 1;
	pthread_mutex_unlock(&s->mu);

	if (s->read_hook)
		s->read_hook(s->read_hook_arg);
	c = dsk_ctx_get(s);
	rc = dsk_get_read(c, &p, iov, iovcnt);
	dsk_ctx_put(c);

	pthread_mutex_lock(&s->mu);
	if (rc < 0)
		dsk_get_failed(s, b, idx, rc);
	dsk_bucket_release(s, b, 0);
	pthread_mutex_unlock(&s->mu);
	return rc < 0 ? rc : (int64_t)p.len;
}
