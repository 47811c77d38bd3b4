/*
 * io_sync.c - the synchronous backend of struct dsk_io_ops, for kernels or
 * sandboxes without io_uring (ENOSYS, EPERM) and for tests: pread, pwrite and
 * fdatasync one request after the other, honouring links the way io_uring
 * does (a failed or short request cancels the rest of its chain).
 */
#include "dsk_int.h"

#include <errno.h>
#include <unistd.h>

static int sync_ctx_init(struct dsk_ioctx *c)
{
	c->bounce_index = -1;
	c->impl = NULL;
	return 0;
}

static void sync_ctx_fini(struct dsk_ioctx *c)
{
}

static int64_t sync_rw(struct dsk_io *io)
{
	size_t done = 0;

	if (io->nvec) { /* one try: a short vectored transfer is reported short */
		ssize_t r;

		do
			r = io->op == DSK_IO_READ
				? preadv(io->fd, io->vec, io->nvec, (off_t)io->off)
				: pwritev(io->fd, io->vec, io->nvec, (off_t)io->off);
		while (r < 0 && errno == EINTR);
		return r < 0 ? -errno : (int64_t)r;
	}
	while (done < io->len) {
		char *p = (char *)io->buf + done;
		ssize_t r = io->op == DSK_IO_READ
				? pread(io->fd, p, io->len - done, io->off + done)
				: pwrite(io->fd, p, io->len - done, io->off + done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return done ? (int64_t)done : -errno;
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (int64_t)done;
}

static int sync_run(struct dsk_ioctx *c, struct dsk_io *ios, unsigned n)
{
	int cancel = 0;

	for (unsigned i = 0; i < n; i++) {
		struct dsk_io *io = &ios[i];
		int ok;

		if (io->op == DSK_IO_NOP) {
			ok = io->res >= 0;
		} else if (cancel) {
			io->res = -ECANCELED;
			ok = 0;
		} else if (io->op == DSK_IO_FSYNC) {
			io->res = fdatasync(io->fd) < 0 ? -errno : 0;
			ok = io->res == 0;
		} else {
			io->res = sync_rw(io);
			ok = io->res == (int64_t)io->len;
		}
		cancel = (io->flags & DSK_IO_LINK) && !ok;
	}
	return 0;
}

const struct dsk_io_ops dsk_sync_ops = {
    .name = "sync",
    .ctx_init = sync_ctx_init,
    .ctx_fini = sync_ctx_fini,
    .run = sync_run,
};
