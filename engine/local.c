/*
 * local.c - the local transport: the segment is this engine's own, so a
 * transfer is a copy per iovec (non-temporal for large blocks, checksummed
 * in the same pass when asked), after the same bounds check the data port
 * applies to remote requests.
 */
#include "engine/eng_int.h"

#include "copy.h"
#include "crc32c.h"
#include "lunar.h"

/* Copy n bytes, extending *crc over them when crc is not NULL. */
static void copy(void *dst, const void *src, size_t n, uint32_t *crc)
{
	if (crc)
		*crc = lc_copy_crc32c(dst, src, n, *crc);
	else
		lc_copy(dst, src, n);
}

static int local_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		      const struct iovec *iov, int iovcnt, uint64_t total, uint32_t *crc)
{
	uint64_t size = e->cfg.seg_size;
	char *seg = e->cfg.seg_base;

	if (off > size || total > size - off)
		return LUNAR_ERR_TRANSFER_FAIL;
	seg += off;
	if (crc)
		*crc = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue; /* its base may be NULL, which memcpy must not see */
		if (dir == ENG_WRITE)
			copy(seg, iov[i].iov_base, iov[i].iov_len, crc);
		else
			copy(iov[i].iov_base, seg, iov[i].iov_len, crc);
		seg += iov[i].iov_len;
	}
	return 0;
}

const struct eng_transport_ops eng_local_ops = {
    .xfer = local_xfer,
};
