/*
 * local.c - the local transport: the segment is this engine's own, so a
 * transfer is a copy per iovec (non-temporal for large blocks unless they go
 * to a staging buffer, checksummed in the same pass when asked), after the
 * same bounds check the data port applies to remote requests.
 */
#include "eng_int.h"

#include "atomic.h"
#include "copy.h"
#include "crc32c.h"
#include "failpoint.h"
#include "lunar.h"

#include <string.h>

/* Copy n bytes, extending *crc over them when crc is not NULL; cached: dst
 * is read again at once, so ordinary stores at every length. */
static void copy(void *dst, const void *src, size_t n, uint32_t *crc, int cached)
{
	if (crc)
		*crc = cached ? lc_copy_crc32c_cached(dst, src, n, *crc)
			      : lc_copy_crc32c(dst, src, n, *crc);
	else if (cached)
		memcpy(dst, src, n);
	else
		lc_copy(dst, src, n);
}

static int local_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		      const struct iovec *iov, int iovcnt, uint64_t total,
		      const struct eng_cap *cap, uint32_t *crc, uint64_t deadline_ns, int *live)
{
	uint64_t size = e->cfg.seg_size;
	char *seg = e->cfg.seg_base;

	(void)endpoint;
	(void)deadline_ns; /* a copy: it cannot stall on a peer */
	(void)cap;	   /* our own segment: the proxy needs no grant from itself */
	(void)live;	   /* no socket */
	if (off > size || total > size - off)
		return LUNAR_ERR_TRANSFER_FAIL;
	seg += off;
	if (crc)
		*crc = 0;
	/* The client's bytes are ordered through its process, the segment's
	 * through the master: nothing ThreadSanitizer can see (atomic.h). */
	LC_UNTRACKED_BEGIN();
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue; /* its base may be NULL, which memcpy must not see */
		if (dir == ENG_WRITE)
			copy(seg, iov[i].iov_base, iov[i].iov_len, crc, 0);
		else
			copy(iov[i].iov_base, seg, iov[i].iov_len, crc, dir == ENG_READ_STAGED);
		seg += iov[i].iov_len;
	}
	LC_UNTRACKED_END();
	return 0;
}

int eng_local_run(struct eng_engine *e, struct eng_op *op, uint64_t total)
{
	uint32_t *crc = op->want_crc ? &op->crc : NULL;
	int rc;

	if (op->dir != ENG_WRITE || !op->epoch)
		return local_xfer(e, op->endpoint, op->dir, op->off, op->iov, op->iovcnt, total,
				  op->cap, crc, 0, NULL);
	/* tests: a write held back between its grant and its copy (sleep) */
	if (LC_FAILPOINT("engine-local-write"))
		return LUNAR_ERR_TRANSFER_FAIL;
	pthread_rwlock_rdlock(&e->epoch_lock);
	rc = op->epoch == atomic_load(&e->epoch)
		 ? local_xfer(e, op->endpoint, op->dir, op->off, op->iov, op->iovcnt, total,
			      op->cap, crc, 0, NULL)
		 : LUNAR_ERR_TRANSFER_FAIL;
	pthread_rwlock_unlock(&e->epoch_lock);
	return rc;
}

const struct eng_transport_ops eng_local_ops = {
    .xfer = local_xfer,
};
