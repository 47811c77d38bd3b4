/*
 * rdma_srv.c - the owner's side of the RDMA connect (rdma_int.h): check the
 * client's body and, on a keyed engine, the capability it brought; create
 * as many QPs, connect them to the client's, answer with their numbers and
 * the segment's address and rkey; then hold them for as long as the
 * connection that asked stays open, which is the client's to close.
 */
#include "rdma_int.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

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
	struct iovec v[2] = {{&rep, q->s ? sizeof(rep) : sizeof(rep.h)}, {(void *)body, blen}};
	struct eng_iovc c;

	eng_wire_rep_encode(&rep.h);
	if (q->s)
		eng_rdma_rep_seal(&rep, q->s, q->ctr, body, blen);
	eng_iovc_init(&c, v, blen ? 2 : 1, 0, v[0].iov_len + blen);
	return eng_io_send(q->fd, &c, 0, deadline);
}

/* Hold the QPs until the peer closes (or sends anything: a violation), or
 * the server shuts the connection down. */
static void hold(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char b;

	for (;;) {
		if (poll(&p, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (recv(fd, &b, 1, MSG_DONTWAIT) != -1 || (errno != EAGAIN && errno != EINTR))
			return;
	}
}

/* The body and range of the request, checked: 0, or the refusal status. */
static int check_request(struct eng_engine *e, const struct eng_srv_req *q, struct eng_wire_kreq *k,
			 const unsigned char *body, struct eng_rdma_hs *peer)
{
	struct eng_wire_req *h = &k->h;
	int rc = eng_rdma_hs_decode(body, ENG_RDMA_HS_SIZE, 0, peer);

	if (rc)
		return rc;
	if (h->magic != ENG_WIRE_REQ_MAGIC)
		return LUNAR_ERR_PROTOCOL;
	if (h->version != (q->s ? ENG_WIRE_VERSION_KEYED : ENG_WIRE_VERSION))
		return LUNAR_ERR_VERSION_MISMATCH;
	if (!h->length || h->offset > e->cfg.seg_size || h->length > e->cfg.seg_size - h->offset)
		return LUNAR_ERR_INVALID_PARAMS;
	if (!q->s)
		return 0;
	/* The capability the peer brought is for a READ or a WRITE of the range. */
	h->op = peer->cap_op;
	rc = eng_secret_check(e, k, NULL, 0);
	h->op = ENG_OP_RDMA_CONNECT;
	if (rc)
		eng_reject(e, ENG_REJ_CAPABILITY, q->fd, "no capability for an RDMA connect");
	return rc;
}

int eng_rdma_serve(struct eng_engine *e, const struct eng_srv_req *q, struct eng_wire_kreq *k,
		   const unsigned char *body, uint64_t deadline_ns)
{
	struct eng_rdma_dev *d = e->rdma ? e->rdma->dev : NULL;
	unsigned char in[ENG_RDMA_HS_SIZE], out[ENG_RDMA_HS_SIZE];
	struct eng_rdma_hs peer, mine;
	struct eng_rdma_qps *qps = NULL;
	struct iovec v = {in, sizeof(in)};
	struct eng_iovc c;
	int rc;

	if (!body) {
		eng_iovc_init(&c, &v, 1, 0, sizeof(in));
		rc = eng_io_recv(q->fd, &c, deadline_ns);
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
	/* No device, no segment MR, or QPs that will not connect: the
	 * client uses TCP, on this very connection if it likes. */
	if (!d || !d->seg.mr || d->refuse || eng_rdma_qps_create(d, peer.nqp, 1, &qps, &mine) ||
	    eng_rdma_qps_connect(qps, &mine, &peer, 1)) {
		eng_rdma_qps_destroy(qps);
		return answer(q, LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS, NULL, deadline_ns);
	}
	mine.addr = (uintptr_t)d->seg.base;
	mine.length = d->seg.len;
	mine.rkey = d->seg.mr->rkey;
	eng_rdma_hs_encode(&mine, out);
	rc = answer(q, 0, out, deadline_ns);
	if (!rc)
		hold(q->fd);
	eng_rdma_qps_destroy(qps);
	return -ECONNRESET; /* done with this connection */
}
