/*
 * io.c - the I/O layer the store uses: backend selection (the one place that
 * decides between io_uring and pread/pwrite), the pool of I/O contexts (a
 * ring and an aligned bounce buffer each, under its own mutex, so several
 * worker threads do I/O at once), failure injection for tests, and the
 * staged CRC-checking read used by the scan and by unaligned gets.
 */
#include "dsk_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lunar.h"

const struct dsk_io_ops *dsk_io_select(int force_sync)
{
	int rc;

	if (force_sync)
		return &dsk_sync_ops;
	rc = dsk_uring_probe();
	if (rc == 0)
		return &dsk_uring_ops;
	if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES) {
		LC_WARN(DSK_LOG, "io_uring unavailable (%s): synchronous I/O", strerror(-rc));
		return &dsk_sync_ops;
	}
	LC_ERROR(DSK_LOG, "io_uring setup: %s", strerror(-rc));
	return NULL;
}

int dsk_ctxpool_init(struct dsk_store *s)
{
	int i, rc;

	for (i = 0; i < DSK_NCTX; i++) {
		struct dsk_ioctx *c = &s->ctx[i];

		c->s = s;
		c->bounce_index = -1;
		if (posix_memalign(&c->bounce, DSK_ALIGN, DSK_BOUNCE)) {
			c->bounce = NULL;
			goto err_fini;
		}
		memset(c->bounce, 0, DSK_BOUNCE);
		rc = s->ops->ctx_init(c);
		if (rc < 0) {
			LC_ERROR(DSK_LOG, "%s context: %s", s->ops->name, strerror(-rc));
			free(c->bounce);
			c->bounce = NULL;
			goto err_fini;
		}
		pthread_mutex_init(&c->mu, NULL);
	}
	return 0;

err_fini:
	while (--i >= 0) {
		s->ops->ctx_fini(&s->ctx[i]);
		pthread_mutex_destroy(&s->ctx[i].mu);
		free(s->ctx[i].bounce);
		s->ctx[i].bounce = NULL;
	}
	return LUNAR_ERR_INTERNAL;
}

void dsk_ctxpool_fini(struct dsk_store *s)
{
	for (int i = 0; i < DSK_NCTX; i++) {
		struct dsk_ioctx *c = &s->ctx[i];

		if (!c->bounce)
			continue;
		s->ops->ctx_fini(c);
		pthread_mutex_destroy(&c->mu);
		free(c->bounce);
		c->bounce = NULL;
	}
}

struct dsk_ioctx *dsk_ctx_get(struct dsk_store *s)
{
	unsigned start = atomic_fetch_add_explicit(&s->ctx_next, 1, memory_order_relaxed);

	for (unsigned i = 0; i < DSK_NCTX; i++) {
		struct dsk_ioctx *c = &s->ctx[(start + i) % DSK_NCTX];

		if (pthread_mutex_trylock(&c->mu) == 0)
			return c;
	}
	pthread_mutex_lock(&s->ctx[start % DSK_NCTX].mu);
	return &s->ctx[start % DSK_NCTX];
}

void dsk_ctx_put(struct dsk_ioctx *c)
{
	pthread_mutex_unlock(&c->mu);
}

/* Turn the first request of the armed op into a failure that never reaches
 * the disk, and cancel what is linked after it, as the kernel would. */
static void dsk_io_inject(struct dsk_store *s, struct dsk_io *ios, unsigned n)
{
	int op = atomic_load(&s->inject_op);

	if (!op)
		return;
	for (unsigned i = 0; i < n; i++) {
		if ((int)ios[i].op != op)
			continue;
		if (!atomic_compare_exchange_strong(&s->inject_op, &op, 0))
			return;
		ios[i].op = DSK_IO_NOP;
		ios[i].res = -atomic_load(&s->inject_err);
		for (unsigned j = i; j + 1 < n && (ios[j].flags & DSK_IO_LINK); j++) {
			ios[j + 1].op = DSK_IO_NOP;
			ios[j + 1].res = -ECANCELED;
		}
		return;
	}
}

int dsk_io_run(struct dsk_ioctx *c, struct dsk_io *ios, unsigned n)
{
	struct dsk_store *s = c->s;
	int rc;

	dsk_io_inject(s, ios, n);
	atomic_fetch_add(&s->inflight, n);
	rc = s->ops->run(c, ios, n);
	atomic_fetch_sub(&s->inflight, n);
	if (rc < 0)
		for (unsigned i = 0; i < n; i++)
			if (ios[i].op != DSK_IO_NOP)
				ios[i].res = rc;
	return rc;
}

void dsk_iov_to_buf(const struct iovec *iov, int iovcnt, uint64_t skip, void *dst, size_t n)
{
	char *d = dst;

	for (int i = 0; i < iovcnt && n; i++) {
		size_t l = iov[i].iov_len;

		if (skip >= l) {
			skip -= l;
			continue;
		}
		l -= skip;
		if (l > n)
			l = n;
		memcpy(d, (const char *)iov[i].iov_base + skip, l);
		d += l;
		n -= l;
		skip = 0;
	}
}

uint32_t dsk_buf_to_iov_crc(const struct iovec *iov, int iovcnt, uint64_t skip, const void *src,
			    size_t n, uint32_t crc)
{
	const char *p = src;

	for (int i = 0; i < iovcnt && n; i++) {
		size_t l = iov[i].iov_len;

		if (skip >= l) {
			skip -= l;
			continue;
		}
		l -= skip;
		if (l > n)
			l = n;
		crc = lc_copy_crc32c((char *)iov[i].iov_base + skip, p, l, crc);
		p += l;
		n -= l;
		skip = 0;
	}
	return crc;
}

int dsk_read_crc(struct dsk_ioctx *c, int fd, uint64_t off, uint64_t len, const struct iovec *iov,
		 int iovcnt, uint32_t *crc)
{
	uint32_t h = 0;

	for (uint64_t pos = 0; pos < len;) {
		size_t chunk = len - pos > DSK_BOUNCE ? DSK_BOUNCE : (size_t)(len - pos);
		struct dsk_io io;

		/* off is DSK_ALIGN aligned and chunks are whole bounce buffers, so
		 * the padded read stays aligned for O_DIRECT. */
		dsk_io_set(&io, DSK_IO_READ, fd, c->bounce, DSK_PAD(chunk, DSK_ALIGN), off + pos,
			   c->bounce_index);
		dsk_io_run(c, &io, 1);
		if (io.res < 0) {
			LC_WARN(DSK_LOG, "read fd %d at %llu: %s", fd,
				(unsigned long long)(off + pos), strerror((int)-io.res));
			return LUNAR_ERR_FILE_READ_FAIL;
		}
		if ((uint64_t)io.res < chunk)
			return LUNAR_ERR_OBJECT_NOT_FOUND; /* the file ends early */
		if (iov)
			h = dsk_buf_to_iov_crc(iov, iovcnt, pos, c->bounce, chunk, h);
		else
			h = lc_crc32c(h, c->bounce, chunk);
		pos += chunk;
	}
	*crc = h;
	return 0;
}
