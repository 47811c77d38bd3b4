/*
 * io_uring.c - the io_uring backend of struct dsk_io_ops: one ring per I/O
 * context, the context's bounce buffer registered as fixed buffer 0 when the
 * kernel lets us pin it. A batch is queued as SQEs (linked where asked), sent
 * with one io_uring_submit_and_wait and reaped in full before returning.
 */
#include "dsk_int.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"

int dsk_uring_probe(void)
{
	struct io_uring ring;
	int rc = io_uring_queue_init(4, &ring, 0);

	if (rc < 0)
		return rc;
	io_uring_queue_exit(&ring);
	return 0;
}

static int uring_ctx_init(struct dsk_ioctx *c)
{
	struct io_uring *ring = calloc(1, sizeof(*ring));
	struct iovec iov = {.iov_base = c->bounce, .iov_len = DSK_BOUNCE};
	int rc;

	if (!ring)
		return -ENOMEM;
	rc = io_uring_queue_init(DSK_RING_DEPTH, ring, 0);
	if (rc < 0)
		goto err_free;
	/* Fixed buffers save the per-I/O page pinning of staged copies; without
	 * them (RLIMIT_MEMLOCK) plain reads and writes work the same. */
	c->bounce_index = io_uring_register_buffers(ring, &iov, 1) == 0 ? 0 : -1;
	if (c->bounce_index < 0)
		LC_DEBUG(DSK_LOG, "bounce buffer not registered; plain I/O for staged copies");
	c->impl = ring;
	return 0;

err_free:
	free(ring);
	return rc;
}

static void uring_ctx_fini(struct dsk_ioctx *c)
{
	struct io_uring *ring = c->impl;

	if (!ring)
		return;
	io_uring_queue_exit(ring);
	free(ring);
	c->impl = NULL;
}

static void uring_prep(struct io_uring_sqe *sqe, struct dsk_io *io)
{
	switch (io->op) {
	case DSK_IO_READ:
		if (io->nvec)
			io_uring_prep_readv(sqe, io->fd, io->vec, (unsigned)io->nvec, io->off);
		else if (io->buf_index >= 0)
			io_uring_prep_read_fixed(sqe, io->fd, io->buf, io->len, io->off,
						 io->buf_index);
		else
			io_uring_prep_read(sqe, io->fd, io->buf, io->len, io->off);
		break;
	case DSK_IO_WRITE:
		if (io->nvec)
			io_uring_prep_writev(sqe, io->fd, io->vec, (unsigned)io->nvec, io->off);
		else if (io->buf_index >= 0)
			io_uring_prep_write_fixed(sqe, io->fd, io->buf, io->len, io->off,
						  io->buf_index);
		else
			io_uring_prep_write(sqe, io->fd, io->buf, io->len, io->off);
		break;
	case DSK_IO_FSYNC: io_uring_prep_fsync(sqe, io->fd, IORING_FSYNC_DATASYNC); break;
	case DSK_IO_NOP: break; /* never queued */
	}
	io_uring_sqe_set_data(sqe, io);
}

/* A ring whose submission failed may still hold our SQEs, which would be
 * sent later with stale pointers: start it over. */
static int uring_reset(struct dsk_ioctx *c)
{
	uring_ctx_fini(c);
	return uring_ctx_init(c);
}

static int uring_run(struct dsk_ioctx *c, struct dsk_io *ios, unsigned n)
{
	struct io_uring *ring = c->impl;
	struct io_uring_sqe *last = NULL;
	unsigned queued = 0;
	int rc;

	if (!ring)
		return -EIO;
	for (unsigned i = 0; i < n; i++) {
		struct io_uring_sqe *sqe;

		if (ios[i].op == DSK_IO_NOP)
			continue;
		sqe = io_uring_get_sqe(ring);
		if (!sqe)
			return -EOVERFLOW; /* n > DSK_RING_DEPTH: a caller bug */
		uring_prep(sqe, &ios[i]);
		if (ios[i].flags & DSK_IO_LINK)
			sqe->flags |= IOSQE_IO_LINK;
		last = sqe;
		queued++;
	}
	if (!queued)
		return 0;
	last->flags &= ~IOSQE_IO_LINK; /* a chain ends within its batch */
	do
		rc = io_uring_submit_and_wait(ring, queued);
	while (rc == -EINTR);
	if (rc < 0 || (unsigned)rc != queued) {
		LC_ERROR(DSK_LOG, "io_uring submit: %s", strerror(rc < 0 ? -rc : EIO));
		/* What was submitted completes before the ring goes away. */
		if (rc > 0)
			io_uring_submit_and_wait(ring, (unsigned)rc);
		uring_reset(c);
		return rc < 0 ? rc : -EIO;
	}
	for (unsigned done = 0; done < queued; done++) {
		struct io_uring_cqe *cqe;
		struct dsk_io *io;

		do
			rc = io_uring_wait_cqe(ring, &cqe);
		while (rc == -EINTR);
		if (rc < 0) {
			LC_ERROR(DSK_LOG, "io_uring wait: %s", strerror(-rc));
			uring_reset(c);
			return rc;
		}
		io = io_uring_cqe_get_data(cqe);
		io->res = cqe->res;
		io_uring_cqe_seen(ring, cqe);
	}
	return 0;
}

const struct dsk_io_ops dsk_uring_ops = {
    .name = "io_uring",
    .ctx_init = uring_ctx_init,
    .ctx_fini = uring_ctx_fini,
    .run = uring_run,
};
