/*
 * rdma_qp.c - sets of RC queue pairs: creation, the INIT -> RTR -> RTS
 * walk towards the peer's QPs, posting one-sided READ/WRITE requests with a
 * credit per send-queue slot, and completions: whichever transfer thread
 * holds the poll lock polls the shared CQ for everyone (busy for a short
 * while, then asleep on the completion channel), the others wait on a
 * condition variable. A failed or late transfer forces the QPs to ERR and
 * waits for the flushed requests, so no DMA outlives the call.
 */
#include "rdma_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"

#define ENG_RDMA_SPINS	   2000 /* empty CQ polls before sleeping on the channel */
#define ENG_RDMA_NAP_MS	   1	/* the longest sleep before looking again */
#define ENG_RDMA_FLUSH_NS  (10ull * 1000000000ull) /* flushes are late: log it */
#define ENG_RDMA_WC_BATCH  16
#define ENG_RDMA_RETRY_CNT 7
#define ENG_RDMA_RNR_CNT   7
#define ENG_RDMA_TIMEOUT   14 /* 4.096 us * 2^14: 67 ms per ack timeout */

static int qp_init(struct eng_rdma_qps *q, struct ibv_qp *qp, int remote)
{
	struct ibv_qp_attr a = {
	    .qp_state = IBV_QPS_INIT,
	    .pkey_index = 0,
	    .port_num = q->dev->port,
	    .qp_access_flags = remote ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE : 0,
	};

	return q->dev->ibv.modify_qp(
	    qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static struct ibv_qp *qp_new(struct eng_rdma_qps *q, int remote)
{
	struct ibv_qp_init_attr ia = {
	    .send_cq = q->cq,
	    .recv_cq = q->cq,
	    .qp_type = IBV_QPT_RC,
	    .sq_sig_all = 0,
	    .cap = {.max_send_wr = ENG_RDMA_SQ_DEPTH,
		    .max_recv_wr = 1,
		    .max_send_sge = 1,
		    .max_recv_sge = 1},
	};
	struct ibv_qp *qp = q->dev->ibv.create_qp(q->dev->pd, &ia);

	if (qp && qp_init(q, qp, remote)) {
		q->dev->ibv.destroy_qp(qp);
		return NULL;
	}
	return qp;
}

/* The CQ, its channel (non-blocking), the locks; 0 or -errno. */
static int qps_base(struct eng_rdma_qps *q, int nqp)
{
	struct eng_rdma_dev *d = q->dev;

	q->ch = d->ibv.create_comp_channel(d->ctx);
	if (!q->ch)
		return -ENOMEM;
	if (fcntl(q->ch->fd, F_SETFL, fcntl(q->ch->fd, F_GETFL) | O_NONBLOCK) < 0)
		return -errno;
	q->cq = d->ibv.create_cq(d->ctx, nqp * ENG_RDMA_SQ_DEPTH + 1, q, q->ch, 0);
	if (!q->cq)
		return -ENOMEM;
	pthread_mutex_init(&q->poll_lock, NULL);
	pthread_mutex_init(&q->wait_lock, NULL);
	/* The nap counts on the monotonic clock: on the wall clock a step
	 * back during it would stretch it by the step. */
	lc_cond_init(&q->wait_cond);
	return 0;
}

int eng_rdma_qps_create(struct eng_rdma_dev *d, int nqp, int remote, struct eng_rdma_qps **out,
			struct eng_rdma_hs *mine)
{
	struct eng_rdma_qps *q;
	uint32_t rnd;
	int rc;

	if (nqp < 1 || nqp > ENG_RDMA_QP_MAX || !(q = calloc(1, sizeof(*q))))
		return -EINVAL;
	q->dev = d;
	q->watch_fd = -1;
	rc = qps_base(q, nqp);
	memset(mine, 0, sizeof(*mine));
	for (int i = 0; !rc && i < nqp; i++) {
		q->qp[i] = qp_new(q, remote);
		if (!q->qp[i]) {
			rc = -ENOMEM;
			break;
		}
		q->nqp = i + 1;
		atomic_init(&q->credits[i], ENG_RDMA_SQ_DEPTH);
		auth_random(&rnd, sizeof(rnd));
		mine->qpn[i] = q->qp[i]->qp_num;
		mine->psn[i] = rnd & ENG_RDMA_QPN_MAX;
	}
	for (int i = 0; !rc && remote && d->windows && i < ENG_RDMA_SGE_MAX; i++)
		if (!(q->mw[i] = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2)))
			rc = -ENOMEM;
	if (rc) {
		eng_rdma_qps_destroy(q);
		return rc;
	}
	mine->nqp = (uint16_t)nqp;
	mine->mtu = d->mtu;
	mine->port = d->port;
	mine->lid = d->lid;
	memcpy(mine->gid, d->gid, 16);
	*out = q;
	return 0;
}

static int qp_rtr(struct eng_rdma_qps *q, struct ibv_qp *qp, const struct eng_rdma_hs *peer, int i,
		  uint8_t mtu)
{
	struct eng_rdma_dev *d = q->dev;
	struct ibv_qp_attr a = {
	    .qp_state = IBV_QPS_RTR,
	    .path_mtu = mtu,
	    .dest_qp_num = peer->qpn[i],
	    .rq_psn = peer->psn[i],
	    .max_dest_rd_atomic = (uint8_t)d->max_rd_atom,
	    .min_rnr_timer = 12,
	    .ah_attr = {.dlid = peer->lid, .sl = 0, .src_path_bits = 0, .port_num = d->port},
	};

	if (d->gid_index >= 0) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	return d->ibv.modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER);
}

static int qp_rts(struct eng_rdma_qps *q, struct ibv_qp *qp, uint32_t psn)
{
	struct ibv_qp_attr a = {
	    .qp_state = IBV_QPS_RTS,
	    .timeout = ENG_RDMA_TIMEOUT,
	    .retry_cnt = ENG_RDMA_RETRY_CNT,
	    .rnr_retry = ENG_RDMA_RNR_CNT,
	    .sq_psn = psn,
	    .max_rd_atomic = (uint8_t)q->dev->max_rd_atom,
	};

	return q->dev->ibv.modify_qp(qp, &a,
				     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					 IBV_QP_MAX_QP_RD_ATOMIC);
}

int eng_rdma_qps_connect(struct eng_rdma_qps *q, const struct eng_rdma_hs *mine,
			 const struct eng_rdma_hs *peer)
{
	uint8_t mtu = mine->mtu < peer->mtu ? mine->mtu : peer->mtu;
	int rc;

	if (peer->nqp != q->nqp)
		return -EPROTO;
	for (int i = 0; i < q->nqp; i++) {
		rc = qp_rtr(q, q->qp[i], peer, i, mtu);
		if (!rc)
			rc = qp_rts(q, q->qp[i], mine->psn[i]);
		if (rc)
			return rc > 0 ? -rc : -EIO;
	}
	return 0;
}

/* Free q's windows: bound or not, their rkeys reach nothing after. */
static void windows_free(struct eng_rdma_qps *q)
{
	for (int i = 0; i < ENG_RDMA_SGE_MAX; i++)
		if (q->mw[i]) {
			ibv_dealloc_mw(q->mw[i]);
			q->mw[i] = NULL;
		}
}

void eng_rdma_qps_destroy(struct eng_rdma_qps *q)
{
	if (!q)
		return;
	windows_free(q); /* first: a bound type 2 window holds its QP */
	for (int i = 0; i < ENG_RDMA_QP_MAX; i++)
		if (q->qp[i])
			q->dev->ibv.destroy_qp(q->qp[i]);
	if (q->cq) {
		q->dev->ibv.destroy_cq(q->cq);
		pthread_mutex_destroy(&q->poll_lock);
		pthread_mutex_destroy(&q->wait_lock);
		pthread_cond_destroy(&q->wait_cond);
	}
	if (q->ch)
		q->dev->ibv.destroy_comp_channel(q->ch);
	free(q);
}

/* Account n completions: credits back, failures noted, counts down. A
 * waiter's stack may be gone once its count reaches 0: touched last. */
static void dispatch(struct eng_rdma_qps *q, const struct ibv_wc *wc, int n)
{
	for (int i = 0; i < n; i++) {
		struct eng_rdma_wait *w = (void *)(uintptr_t)(wc[i].wr_id & ~(uint64_t)7);

		atomic_fetch_add(&q->credits[wc[i].wr_id & 7], 1);
		if (wc[i].status != IBV_WC_SUCCESS) {
			if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
				LC_DEBUG(ENG_LOG, "RDMA completion failed: status %d",
					 (int)wc[i].status);
			atomic_store(&q->broken, 1);
			atomic_store(&w->failed, 1);
		}
		atomic_fetch_sub(&w->left, 1);
	}
}

/* Poll the CQ empty; how many completions came. Poll lock held. */
static int drain(struct eng_rdma_qps *q)
{
	struct ibv_wc wc[ENG_RDMA_WC_BATCH];
	int n, total = 0;

	while ((n = ibv_poll_cq(q->cq, ENG_RDMA_WC_BATCH, wc)) > 0) {
		dispatch(q, wc, n);
		total += n;
	}
	if (n < 0)
		atomic_store(&q->broken, 1);
	return total;
}

/* Sleep on the completion channel for at most ms; the first call only
 * arms it, as a completion may have come before: the caller drains again.
 * A hang-up on q->watch_fd (poll skips -1) breaks q. Poll lock held. */
static void sleep_channel(struct eng_rdma_qps *q, int ms)
{
	/* Once broken, only the flushes are waited for. */
	struct pollfd p[2] = {
	    {.fd = q->ch->fd, .events = POLLIN},
	    {.fd = atomic_load(&q->broken) ? -1 : q->watch_fd, .events = POLLRDHUP}};
	struct ibv_cq *cq;
	void *ctx;

	if (!q->armed) {
		q->armed = !ibv_req_notify_cq(q->cq, 0);
		return;
	}
	if (poll(p, 2, ms) <= 0)
		return;
	if (p[1].revents) {
		LC_DEBUG(ENG_LOG, "RDMA: the owner hung up its lifeline");
		atomic_store(&q->broken, 1);
	}
	if ((p[0].revents & POLLIN) && !q->dev->ibv.get_cq_event(q->ch, &cq, &ctx)) {
		q->dev->ibv.ack_cq_events(cq, 1);
		q->armed = 0;
	}
}

/* One step towards w's completion: poll for everyone, or wait for who does. */
static void progress(struct eng_rdma_qps *q, struct eng_rdma_wait *w, unsigned *idle)
{
	struct timespec ts;
	int n;

	if (!pthread_mutex_trylock(&q->poll_lock)) {
		n = drain(q);
		if (n)
			*idle = 0;
		else if (++*idle > ENG_RDMA_SPINS)
			sleep_channel(q, ENG_RDMA_NAP_MS);
		pthread_mutex_unlock(&q->poll_lock);
		if (n) {
			pthread_mutex_lock(&q->wait_lock);
			pthread_cond_broadcast(&q->wait_cond);
			pthread_mutex_unlock(&q->wait_lock);
		}
		return;
	}
	/* A broadcast between the check and the wait is lost: hence the nap's bound. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += ENG_RDMA_NAP_MS * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&q->wait_lock);
	if (atomic_load(&w->left))
		pthread_cond_timedwait(&q->wait_cond, &q->wait_lock, &ts);
	pthread_mutex_unlock(&q->wait_lock);
}

static int take_credit(atomic_int *c)
{
	int v = atomic_load(c);

	while (v > 0)
		if (atomic_compare_exchange_weak(c, &v, v - 1))
			return 1;
	return 0;
}

/* QP qp, or with qp < 0 the next QP, with a credit, the credit taken: its
 * index, or -errno. */
static int take_qp(struct eng_rdma_qps *q, struct eng_rdma_wait *w, int qp, uint64_t deadline_ns)
{
	unsigned idle = 0;

	for (;;) {
		if (atomic_load(&q->broken))
			return -EIO;
		if (qp >= 0 && take_credit(&q->credits[qp]))
			return qp;
		for (int k = 0; qp < 0 && k < q->nqp; k++) {
			unsigned i = atomic_fetch_add(&q->next, 1) % (unsigned)q->nqp;

			if (take_credit(&q->credits[i]))
				return (int)i;
		}
		if (lc_now_ns() > deadline_ns)
			return -ETIMEDOUT;
		progress(q, w, &idle);
	}
}

/* A work request's id: its wait, and QP i's index below (w is 8-aligned). */
static uint64_t wr_id(const struct eng_rdma_wait *w, unsigned i)
{
	return (uintptr_t)w | i;
}

/* Count a request just given to QP i (rc of the verb) in *w: 0, or on
 * failure the count and the credit back and -errno. */
static int posted(struct eng_rdma_qps *q, unsigned i, struct eng_rdma_wait *w, int rc)
{
	if (!rc)
		return 0;
	atomic_fetch_sub(&w->left, 1);
	atomic_fetch_add(&q->credits[i], 1);
	return rc > 0 ? -rc : -EIO;
}

/* Post the signaled work request wr on QP qp (< 0: the next) once it has
 * a credit, counted in *w. */
static int post_wr(struct eng_rdma_qps *q, struct eng_rdma_wait *w, int qp, struct ibv_send_wr *wr,
		   uint64_t deadline_ns)
{
	struct ibv_send_wr *bad;
	int i = take_qp(q, w, qp, deadline_ns);

	if (i < 0)
		return i;
	wr->wr_id = wr_id(w, (unsigned)i);
	wr->send_flags = IBV_SEND_SIGNALED;
	atomic_fetch_add(&w->left, 1);
	return posted(q, (unsigned)i, w, ibv_post_send(q->qp[i], wr, &bad));
}

/* Post one chunk on QP qp (< 0: the next with a credit). */
static int post_one(struct eng_rdma_qps *q, struct eng_rdma_wait *w, int qp, int write, void *local,
		    uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		    uint64_t deadline_ns)
{
	struct ibv_sge sge = {.addr = (uintptr_t)local, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {
	    .sg_list = &sge,
	    .num_sge = 1,
	    .opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
	    .wr.rdma = {.remote_addr = raddr, .rkey = rkey},
	};

	return post_wr(q, w, qp, &wr, deadline_ns);
}

/* Bind type 2 window i (piece i) to [addr, addr + len) of mr with access,
 * on the piece's QP, under a new rkey: only requests coming in on that QP
 * reach it. */
static int bind_one(struct eng_rdma_qps *q, struct eng_rdma_wait *w, unsigned i, struct ibv_mr *mr,
		    uint64_t addr, uint64_t len, unsigned access, uint64_t deadline_ns)
{
	struct ibv_mw *mw = q->mw[i];
	struct ibv_send_wr wr = {
	    .opcode = IBV_WR_BIND_MW,
	    .bind_mw =
		{.mw = mw,
		 .rkey = ibv_inc_rkey(mw->rkey),
		 .bind_info = {.mr = mr, .addr = addr, .length = len, .mw_access_flags = access}},
	};
	int rc = post_wr(q, w, eng_rdma_piece_qp(q, i), &wr, deadline_ns);

	/* The provider names the window by its current rkey: the new one
	 * from here (a failed bind leaves the set to be fenced). */
	if (!rc)
		mw->rkey = wr.bind_mw.rkey;
	return rc;
}

/* Invalidate window i on its piece's QP: its rkey reaches nothing after. */
static int unbind_one(struct eng_rdma_qps *q, struct eng_rdma_wait *w, unsigned i,
		      uint64_t deadline_ns)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_LOCAL_INV, .invalidate_rkey = q->mw[i]->rkey};

	return post_wr(q, w, eng_rdma_piece_qp(q, i), &wr, deadline_ns);
}

int eng_rdma_qps_post(struct eng_rdma_qps *q, struct eng_rdma_wait *w, int qp, int write,
		      void *local, uint64_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		      uint64_t deadline_ns)
{
	char *b = local;
	int rc = 0;

	while (len && !rc) {
		uint32_t n = len > ENG_RDMA_CHUNK ? ENG_RDMA_CHUNK : (uint32_t)len;

		rc = post_one(q, w, qp, write, b, n, lkey, raddr, rkey, deadline_ns);
		b += n;
		raddr += n;
		len -= n;
	}
	return rc;
}

void eng_rdma_qps_fence(struct eng_rdma_qps *q)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

	atomic_store(&q->broken, 1);
	for (int i = 0; i < q->nqp; i++)
		q->dev->ibv.modify_qp(q->qp[i], &a, IBV_QP_STATE);
}

int eng_rdma_qps_wait(struct eng_rdma_qps *q, struct eng_rdma_wait *w, uint64_t deadline_ns)
{
	uint64_t warn_at;
	unsigned idle = 0;
	int rc = 0;

	while (atomic_load(&w->left)) {
		if (atomic_load(&w->failed) || atomic_load(&q->broken)) {
			rc = -EIO;
			break;
		}
		if (lc_now_ns() > deadline_ns) {
			rc = -ETIMEDOUT;
			break;
		}
		progress(q, w, &idle);
	}
	if (!rc && atomic_load(&w->failed))
		rc = -EIO;
	if (!rc)
		return 0;
	/* Never return while the NIC may still write into the caller's memory. */
	eng_rdma_qps_fence(q);
	warn_at = lc_now_ns() + ENG_RDMA_FLUSH_NS;
	while (atomic_load(&w->left)) {
		progress(q, w, &idle);
		if (warn_at && lc_now_ns() > warn_at) {
			LC_WARN(ENG_LOG, "RDMA: flushed requests not completed after 10 s");
			warn_at = 0;
		}
	}
	return rc;
}

int eng_rdma_qps_open(struct eng_rdma_qps *q, struct eng_rdma_xf *x, struct ibv_mr *const mr[],
		      uint64_t deadline_ns)
{
	/* A get: the owner writes into the pieces; a put: it reads them. */
	unsigned access =
	    x->cap_op == ENG_OP_READ ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
	struct eng_rdma_wait w;
	int rc = 0, wrc;

	atomic_init(&w.left, 0);
	atomic_init(&w.failed, 0);
	q->nbound = 0;
	for (unsigned i = 0; i < x->nsge && !rc; i++) {
		rc = q->mw[i] ? bind_one(q, &w, i, mr[i], x->sge[i].addr, x->sge[i].len, access,
					 deadline_ns)
			      : -EIO;
		q->nbound += !rc;
	}
	/* Even after a failed bind: what was posted must finish first. */
	wrc = eng_rdma_qps_wait(q, &w, deadline_ns);
	if (rc || wrc)
		return rc ? rc : wrc;
	for (unsigned i = 0; i < x->nsge; i++)
		x->sge[i].rkey = q->mw[i]->rkey;
	return 0;
}

int eng_rdma_qps_close(struct eng_rdma_qps *q, uint64_t deadline_ns)
{
	struct eng_rdma_wait w;
	int rc = 0, wrc;

	atomic_init(&w.left, 0);
	atomic_init(&w.failed, 0);
	/* Only those: invalidating a window never bound is an error (and
	 * crashed rxe). */
	for (unsigned i = 0; i < q->nbound && !rc; i++)
		rc = q->mw[i] ? unbind_one(q, &w, i, deadline_ns) : -EIO;
	q->nbound = 0;
	wrc = eng_rdma_qps_wait(q, &w, deadline_ns);
	if (!rc && !wrc)
		return 0;
	/* Unbound or not, freed windows open nothing, and fenced QPs let
	 * no request in. */
	eng_rdma_qps_fence(q);
	windows_free(q);
	return rc ? rc : wrc;
}
