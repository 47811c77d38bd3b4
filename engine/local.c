/*
 * local.c - the local transport: the segment is this engine's own, so a
 * transfer is a memcpy per iovec, after the same bounds check the data port
 * applies to remote requests.
 */
#include "engine/eng_int.h"

#include <string.h>

#include "lunar.h"

static int local_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		      const struct iovec *iov, int iovcnt, uint64_t total)
{
	uint64_t size = e->cfg.seg_size;
	char *seg = e->cfg.seg_base;

	if (off > size || total > size - off)
		return LUNAR_ERR_TRANSFER_FAIL;
	seg += off;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue; /* its base may be NULL, which memcpy must not see */
		if (dir == ENG_WRITE)
			memcpy(seg, iov[i].iov_base, iov[i].iov_len);
		else
			memcpy(iov[i].iov_base, seg, iov[i].iov_len);
		seg += iov[i].iov_len;
	}
	return 0;
}

const struct eng_transport_ops eng_local_ops = {
    .xfer = local_xfer,
};
