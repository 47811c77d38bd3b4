/*
 * rdma_srv.c - the owner's side of RDMA (rdma_int.h): check the client's
 * connect body and, on a keyed engine, the capability it brought; create
 * as many QPs, connect them to the client's, answer with their numbers and
 * the segment's address and rkey; then hold them for as long as the
 * connection that asked stays open, which is the client's to close (or,
 * keyed, while it waits for work, the server's, when it needs the slot). On a
 * keyed engine that connection then carries the client's transfer
 * requests: each checked against its capability like a TCP one, then
 * served by RDMA from this side into or out of the client's memory.
 */
#include "rdma_int.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "crc32c.h"
#include "failpoint.h"
#include "log.h"
#include "lunar.h"

/* Send the reply: status, and on 0 the body. 0 or -errno. */
static int answer(const struct eng_srv_req *q, int32_t status, const unsigned char *body,
		  uint64_t deadline)
{
	size_t blen = status ? 0 : ENG_RDMA_HS_SIZE;
	struct eng_wire_krep rep = {
	    .h = {.magic = ENG_WIRE_REP_MAGIC, .status = status, .id = q->id, .length = blen},
	};
	struct iovec v[2] = {{&rep, sizeof(rep)}, {(void *)body, blen}};
	struct eng_iovc c;

	eng_wire_rep_encode(&rep.h);
	if (q->s)
		eng_wire_krep_seal(&rep, q->s, q->ctr, body, blen);
	eng_iovc_init(&c, v, blen ? 2 : 1, 0, v[0].iov_len + blen);
	return eng_io_send(q->fd, &c, 0, deadline);
}

/* The capability of keyed request k, for op (READ or WRITE) of its range:
 * 0, or refused (counted, logged: why). */
static int cap_check(struct eng_engine *e, struct eng_wire_kreq *k, uint16_t op, int fd,
		     const char *why)
{
	uint16_t was = k->h.op;
	int rc;

	k->h.op = op;
	rc = eng_secret_check(e, k, NULL, 0);
	k->h.op = was;
	if (rc)
		eng_reject(e, ENG_REJ_CAPABILITY, fd, why);
	return rc;
}

/* The body and range of the request, checked: 0, or the refusal status. */
static int check_request(struct eng_engine *e, const struct eng_srv_req *q, struct eng_wire_kreq *k,
			 const unsigned char *body, struct eng_rdma_hs *peer)
{
	uint16_t version = q->s ? ENG_WIRE_VERSION_KEYED : ENG_WIRE_VERSION;
	int rc = eng_rdma_hs_decode(body, ENG_RDMA_HS_SIZE, 0, peer);

	if (!rc)
		rc = eng_wire_req_check(&k->h, e->cfg.seg_size, version,
					ENG_OP_SET(ENG_OP_RDMA_CONNECT));
	if (rc)
		return rc;
	/* The capability the peer brought is for a READ or a WRITE of the range. */
	return q->s ? cap_check(e, k, peer->cap_op, q->fd, "no capability for an RDMA connect") : 0;
}

/* Receive the transfer request whose first byte came, with its body; its
 * MAC and counter checked, q numbered after it. 0, or < 0 to close. */
static int xfer_recv(struct eng_engine *e, struct eng_srv_req *q, struct eng_wire_kreq *k,
		     unsigned char *body, uint64_t deadline)
{
	struct iovec v[2] = {{k, sizeof(*k)}, {body, ENG_RDMA_XF_SIZE}};
	struct eng_iovc c;
	int rc;

	eng_iovc_init(&c, v, 2, 0, sizeof(*k) + ENG_RDMA_XF_SIZE);
	rc = eng_io_recv(q->fd, &c, deadline);
	if (rc)
		return rc;
	rc = eng_wire_kreq_open(k, q->s, body, ENG_RDMA_XF_SIZE);
	if (rc) {
		eng_reject(e, rc, q->fd, rc == ENG_REJ_MAC ? "bad MAC" : "counter seen before");
		return -EACCES;
	}
	q->ctr = k->ctr;
	q->id = k->h.id;
	return 0;
}

/* A transfer request's header, body and capability: 0 and *x, or the
 * refusal status. */
static int xfer_check(struct eng_engine *e, const struct eng_srv_req *q, struct eng_wire_kreq *k,
		      const unsigned char *body, struct eng_rdma_xf *x)
{
	int rc = eng_wire_req_check(&k->h, e->cfg.seg_size, ENG_WIRE_VERSION_KEYED,
				    ENG_OP_SET(ENG_OP_RDMA_XFER));

	if (!rc)
		rc = eng_rdma_xf_decode(body, ENG_RDMA_XF_SIZE, k->h.length, x);
	if (rc)
		return rc;
	return cap_check(e, k, x->cap_op, q->fd, "no capability for an RDMA transfer");
}

/* Move x's bytes between [off, ...) of the segment and the client's
 * memory, each piece on its QP, a chunk of each in turn (so every QP gets
 * work while credits last, rather than one piece filling its QP's queue
 * first): 0, or -errno (the QPs are then fenced). */
static int xfer_run(struct eng_rdma_dev *d, struct eng_rdma_qps *qps, const struct eng_rdma_xf *x,
		    uint64_t off, uint64_t deadline)
{
	uint64_t at[ENG_RDMA_SGE_MAX], done[ENG_RDMA_SGE_MAX] = {0};
	struct eng_rdma_wait w;
	int rc = 0, wrc, more = 1;

	atomic_init(&w.left, 0);
	atomic_init(&w.failed, 0);
	for (unsigned i = 0; i < x->nsge; i++) {
		at[i] = off;
		off += x->sge[i].len;
	}
	while (more && !rc) {
		more = 0;
		for (unsigned i = 0; i < x->nsge && !rc; i++) {
			uint64_t left = x->sge[i].len - done[i];
			uint64_t n = left < ENG_RDMA_CHUNK ? left : ENG_RDMA_CHUNK;

			if (!n)
				continue;
			rc = eng_rdma_qps_post(qps, &w, eng_rdma_piece_qp(qps, i),
					       x->cap_op == ENG_OP_READ,
					       d->seg.base + at[i] + done[i], n, d->seg.lkey,
					       x->sge[i].addr + done[i], x->sge[i].rkey, deadline);
			done[i] += n;
			more = 1;
		}
	}
	/* Even after a failed post: what was posted must finish first. */
	wrc = eng_rdma_qps_wait(qps, &w, deadline);
	if (rc && !wrc)
		eng_rdma_qps_fence(qps);
	return rc ? rc : wrc;
}

/* Serve the client's transfers on q's connection until it closes, the
 * server shuts it down or takes its slot back between transfers, or a
 * request is refused or fails (keyed only). */
static void serve_xfers(struct eng_engine *e, const struct eng_srv_req *lifeline,
			struct eng_rdma_qps *qps)
{
	struct eng_rdma_dev *d = e->rdma->dev;
	struct eng_srv_req q = *lifeline;
	unsigned char body[ENG_RDMA_XF_SIZE];
	struct eng_wire_kreq k;
	struct eng_rdma_xf x;
	uint64_t deadline;
	int32_t status;

	/* A fence or a client gone ends a transfer under way now, not when
	 * its requests time out against the client's fenced QPs. */
	qps->watch_fd = q.fd;
	while (!eng_srv_wait(&q)) {
		deadline = lc_now_ns() + e->timeout_ns;
		if (xfer_recv(e, &q, &k, body, deadline))
			return;
		status = xfer_check(e, &q, &k, body, &x);
		/* tests: a write held back (sleep), or lost with its lifeline */
		if (!status && x.cap_op == ENG_OP_WRITE && LC_FAILPOINT("engine-serve-write"))
			return;
		if (!status && xfer_run(d, qps, &x, k.h.offset, deadline))
			status = LUNAR_ERR_TRANSFER_FAIL;
		/* A WRITE's bytes are what the client's header said, as over TCP. */
		if (!status && x.cap_op == ENG_OP_WRITE &&
		    lc_crc32c(0, d->seg.base + k.h.offset, k.h.length) != k.crc) {
			eng_reject(e, ENG_REJ_CRC, q.fd, "RDMA WRITE unlike its CRC32C");
			status = LUNAR_ERR_CHECKSUM_MISMATCH;
		}
		if (eng_send_rep(&q, status, status ? 0 : k.h.length, 0, deadline) ||
		    (status && status != LUNAR_ERR_CHECKSUM_MISMATCH))
			return;
	}
}

int eng_rdma_serve(struct eng_engine *e, const struct eng_srv_req *q, struct eng_wire_kreq *k,
		   const unsigned char *body, uint64_t deadline_ns)
{
	struct eng_rdma_dev *d = e->rdma ? e->rdma->dev : NULL;
	unsigned char in[ENG_RDMA_HS_SIZE], out[ENG_RDMA_HS_SIZE];
	struct eng_rdma_hs peer, mine;
	struct eng_rdma_qps *qps = NULL;
	int rc;

	if (!body) {
		rc = eng_io_recv_buf(q->fd, in, sizeof(in), deadline_ns);
		if (rc)
			return rc;
		body = in;
	}
	rc = check_request(e, q, k, body, &peer);
	if (rc) {
		LC_DEBUG(ENG_LOG, "RDMA connect refused: %d", rc);
		answer(q, rc, NULL, deadline_ns);
		return -EPROTO;
	}
	/* No device, no segment MR, or QPs that will not connect: the client
	 * uses TCP, on this very connection if it likes; with the segment
	 * still being registered, for now only. */
	if (d && !d->refuse && eng_rdma_seg_state(d) == ENG_SEG_PENDING)
		return answer(q, LUNAR_ERR_BUSY, NULL, deadline_ns);
	if (!d || d->refuse || eng_rdma_seg_state(d) != ENG_SEG_READY ||
	    eng_rdma_qps_create(d, peer.nqp, !e->keyed, &qps, &mine) ||
	    eng_rdma_qps_connect(qps, &mine, &peer)) {
		eng_rdma_qps_destroy(qps);
		return answer(q, LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS, NULL, deadline_ns);
	}
	/* Keyed, only this side posts: where the segment lies, and a key to
	 * it (closed to remote access anyway), are nobody else's business. */
	mine.addr = e->keyed ? 0 : (uintptr_t)d->seg.base;
	mine.length = d->seg.len;
	mine.rkey = e->keyed ? 0 : d->seg.mr->rkey;
	eng_rdma_hs_encode(&mine, out);
	rc = answer(q, 0, out, deadline_ns);
	if (!rc && q->s)
		serve_xfers(e, q, qps);
	else if (!rc) /* EOF, or a byte: a violation either way. Keyless, the
		       * transfers never touch the lifeline, so its idle time says
		       * nothing of them: its slot is not the server's to take. */
		eng_srv_wait(&(struct eng_srv_req){.fd = q->fd});
	eng_rdma_qps_destroy(qps);
	return -ECONNRESET; /* done with this connection */
}
