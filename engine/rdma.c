/*
 * rdma.c - the RDMA transport, client side (SPEC §7): per peer a set of RC
 * QPs set up once over the data port (ENG_OP_RDMA_CONNECT; the TCP
 * connection that carried it stays open as the QPs' lifeline: when it
 * closes, the owner destroys its side), then each transfer is one-sided
 * RDMA READ/WRITE between registered local memory and the owner's segment,
 * cut in ENG_RDMA_CHUNK pieces spread over the QPs. Keyed, the owner moves
 * the bytes instead, one transfer at a time per QP set as the client asks
 * on its lifeline, so concurrent transfers to a peer open more sets. A
 * transfer goes over
 * TCP instead when the peer has no device, the handshake failed (retried
 * later), or local memory is not registered. Also the per-transport
 * transfer counters of every engine.
 */
#include "rdma_int.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"

#define ENG_RDMA_QPS_DEFAULT 4
#define ENG_RDMA_CLOSE_NS    1000000000ull	     /* to invalidate a transfer's windows */
#define ENG_RDMA_RETRY_NS    (30ull * 1000000000ull) /* after a refusal: TCP this long */
/* after an I/O error, a grant refused, a port that refused the connection */
#define ENG_RDMA_REDIAL_NS (1ull * 1000000000ull)

enum peer_state { PEER_CONNECTING, PEER_UP, PEER_TCP };

/* A QP set with one owner and its lifeline (rdma_int.h: how many a peer). */
struct eng_rdma_peer {
	struct eng_rdma_peer *next;
	char endpoint[ENG_ENDPOINT_MAX];
	enum peer_state state; /* under eng_rdma.lock */
	uint64_t retry_ns;     /* PEER_TCP: try again after */
	atomic_int users;      /* the peer list holds one while linked */
	struct eng_rdma_qps *q;
	struct eng_cconn *c; /* the lifeline */
	int busy;	     /* keyed: a transfer uses c; under eng_rdma.lock */
	uint64_t raddr, rlen;
	uint32_t rkey;
	uint64_t mount; /* the mount named by the transfer that set it up (keyed too) */
	int stale;	/* PEER_TCP: the owner refused that transfer's grant */
};

/* One transfer, as rdma_xfer was given it, and its pieces: keyed x and
 * mr (to_sges), keyless lkey (local_keys). */
struct rdma_job {
	const char *endpoint;
	enum eng_dir dir;
	uint64_t off, total;
	const struct iovec *iov;
	int iovcnt;
	const struct eng_cap *cap;
	uint32_t *crc;
	uint64_t deadline;
	int *live; /* the I/O thread's slot, for a transfer over TCP instead */
	struct eng_rdma_xf x;
	struct ibv_mr *mr[ENG_RDMA_SGE_MAX];
	uint32_t lkey[LUNAR_IOV_MAX];
};

static const char *const tr_names[ENG_TR_COUNT] = {"local", "tcp", "rdma"};

const char *eng_transport_name(enum eng_transport t)
{
	return (unsigned)t < ENG_TR_COUNT ? tr_names[t] : "?";
}

void eng_xfer_count(struct eng_engine *e, enum eng_transport t, uint64_t bytes, int rc)
{
	atomic_fetch_add_explicit(&e->xstat[t][0], 1, memory_order_relaxed);
	if (rc)
		atomic_fetch_add_explicit(&e->xstat[t][2], 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&e->xstat[t][1], bytes, memory_order_relaxed);
}

void eng_engine_xfer_stats(const struct eng_engine *e, enum eng_transport t,
			   struct eng_xfer_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!e || (unsigned)t >= ENG_TR_COUNT)
		return;
	out->xfers = atomic_load_explicit(&e->xstat[t][0], memory_order_relaxed);
	out->bytes = atomic_load_explicit(&e->xstat[t][1], memory_order_relaxed);
	out->failures = atomic_load_explicit(&e->xstat[t][2], memory_order_relaxed);
}

uint64_t eng_engine_rdma_fallbacks(const struct eng_engine *e)
{
	return e && e->rdma ? atomic_load(&e->rdma->fallbacks) : 0;
}

const char *eng_engine_rdma_device(const struct eng_engine *e)
{
	return e && e->rdma ? e->rdma->dev->name : NULL;
}

static void peer_free(struct eng_rdma_peer *p)
{
	eng_rdma_qps_destroy(p->q);
	eng_cconn_close(p->c);
	free(p);
}

static void peer_put(struct eng_rdma_peer *p)
{
	if (atomic_fetch_sub(&p->users, 1) == 1)
		peer_free(p);
}

/* Unlink p (if still linked) and drop the list's reference. */
static void peer_retire(struct eng_rdma *r, struct eng_rdma_peer *p)
{
	struct eng_rdma_peer **pp;
	int linked = 0;

	pthread_mutex_lock(&r->lock);
	for (pp = &r->peers; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			linked = 1;
			break;
		}
	pthread_mutex_unlock(&r->lock);
	if (linked)
		peer_put(p);
}

/* The owner's answer to request (ctr, id): its body into body. 0, -EPROTO,
 * -ECONNREFUSED (it said no: *status), -EKEYREJECTED (no to this grant,
 * keyless its mount: UNAUTHORIZED, which says nothing of the next
 * transfer's, so RDMA is tried again as after an I/O error, not held off
 * as after a refusal), -EAGAIN (not yet: BUSY), or -errno. */
static int recv_answer(struct eng_cconn *c, uint64_t ctr, uint64_t id, unsigned char *body,
		       uint64_t deadline, int32_t *status)
{
	struct eng_wire_krep k;
	size_t hsz = sizeof(k);
	size_t blen;
	int rc = eng_io_recv_buf(c->fd, &k, hsz, deadline);

	if (rc)
		return rc;
	/* Read before the MAC is checked only to know whether a body follows. */
	*status = (int32_t)le32toh((uint32_t)k.h.status);
	blen = *status ? 0 : ENG_RDMA_HS_SIZE;
	if (blen && (rc = eng_io_recv_buf(c->fd, body, blen, deadline)))
		return rc;
	if (c->keyed && eng_wire_krep_open(&k, &c->s, ctr, body, blen))
		return -EPROTO;
	if (!c->keyed)
		eng_wire_rep_decode(&k.h);
	if (k.h.magic != ENG_WIRE_REP_MAGIC || k.h.id != id || k.h.length != blen)
		return -EPROTO;
	if (*status == LUNAR_ERR_BUSY)
		return -EAGAIN;
	if (*status == LUNAR_ERR_UNAUTHORIZED)
		return -EKEYREJECTED;
	return *status ? -ECONNREFUSED : 0;
}

/* A request header of ours for op of [off, off + total). */
static struct eng_wire_req request(struct eng_engine *e, uint16_t op, uint64_t off, uint64_t total)
{
	return (struct eng_wire_req){
	    .magic = ENG_WIRE_REQ_MAGIC,
	    .op = op,
	    .offset = off,
	    .length = total,
	    .id = atomic_fetch_add(&e->next_id, 1),
	};
}

/* Exchange bodies on p's connection to the owner; 0 and *theirs, or
 * recv_answer's codes, or another -errno. */
static int exchange(struct eng_engine *e, struct eng_rdma_peer *p, const unsigned char *mine,
		    const struct rdma_job *j, struct eng_rdma_hs *theirs)
{
	struct eng_wire_req req = request(e, ENG_OP_RDMA_CONNECT, j->off, j->total);
	unsigned char body[ENG_RDMA_HS_SIZE];
	int32_t status = 0;
	uint64_t ctr;
	int rc = eng_send_req(p->c, &req, j->cap, 0, mine, ENG_RDMA_HS_SIZE, 0, j->deadline, &ctr);

	if (!rc)
		rc = recv_answer(p->c, ctr, req.id, body, j->deadline, &status);
	if (!rc)
		rc = eng_rdma_hs_decode(body, sizeof(body), 1, theirs) ? -EPROTO : 0;
	if (rc == -ECONNREFUSED)
		LC_DEBUG(ENG_LOG, "RDMA: %s said no (%d): TCP", p->endpoint, status);
	return rc;
}

/* Set up p's QPs with its owner for j, on a connection taken first (an
 * owner that is not there costs no QPs), which an engine stopping cuts
 * short as it does a TCP slice's (j->live); 0, -ECONNREFUSED (the owner cannot),
 * -EKEYREJECTED (not for this grant), -EAGAIN (not yet), -EHOSTDOWN (its
 * port refused the connection: no owner there now), or another -errno.
 * On failure p holds nothing. */
static int peer_connect(struct eng_engine *e, struct eng_rdma_peer *p, const struct rdma_job *j)
{
	struct eng_rdma *r = e->rdma;
	struct eng_rdma_hs mine, theirs;
	unsigned char body[ENG_RDMA_HS_SIZE];
	int pooled, rc = eng_conn_take(e, p->endpoint, j->deadline, &pooled, &p->c, j->live);

	if (rc) /* nobody on its port (gone, not back yet): no refusal of RDMA */
		return rc == -ECONNREFUSED ? -EHOSTDOWN : rc;
	/* An engine stopping cuts the set-up short, as a TCP slice. */
	if (j->live)
		eng_exec_live(e, j->live, p->c->fd);
	rc = eng_rdma_qps_create(r->dev, (int)r->nqp, e->keyed, &p->q, &mine);
	if (!rc) {
		mine.cap_op = j->dir == ENG_WRITE ? ENG_OP_WRITE : ENG_OP_READ;
		eng_rdma_hs_encode(&mine, body);
		rc = exchange(e, p, body, j, &theirs);
	}
	if (j->live)
		eng_exec_live(e, j->live, -1);
	if (!rc && theirs.nqp != mine.nqp)
		rc = -EPROTO;
	if (!rc)
		rc = eng_rdma_qps_connect(p->q, &mine, &theirs);
	if (!rc) {
		p->raddr = theirs.addr;
		p->rlen = theirs.length;
		p->rkey = theirs.rkey;
		/* Keyed, the lifeline carries each transfer's answer instead. */
		if (!e->keyed)
			p->q->watch_fd = p->c->fd;
		return 0;
	}
	eng_cconn_close(p->c); /* the owner destroys its QPs when it sees EOF */
	p->c = NULL;
	eng_rdma_qps_destroy(p->q);
	p->q = NULL;
	return rc;
}

/* A new peer entry for endpoint, linked, connecting. Lock held. */
static struct eng_rdma_peer *peer_new(struct eng_rdma *r, const char *endpoint)
{
	struct eng_rdma_peer *p;

	if (strlen(endpoint) >= sizeof(p->endpoint) || !(p = calloc(1, sizeof(*p))))
		return NULL;
	strcpy(p->endpoint, endpoint);
	atomic_init(&p->users, 1);
	p->next = r->peers;
	r->peers = p;
	return p;
}

/* End what runs on p, which is up, at once: its QPs fenced (what they
 * hold flushed), its lifeline shut down (a keyed wait for an answer ends). */
static void peer_cut(struct eng_rdma_peer *p)
{
	eng_rdma_qps_fence(p->q);
	shutdown(p->c->fd, SHUT_RDWR);
}

/* Connect p (linked, PEER_CONNECTING, referenced, keyed: busy) and publish
 * the outcome; p, or NULL after dropping what we hold of it. */
static struct eng_rdma_peer *peer_up(struct eng_engine *e, struct eng_rdma_peer *p,
				     const struct rdma_job *j)
{
	struct eng_rdma *r = e->rdma;
	int rc = peer_connect(e, p, j);

	pthread_mutex_lock(&r->lock);
	p->state = rc ? PEER_TCP : PEER_UP;
	p->stale = rc == -EKEYREJECTED;
	p->mount = eng_cap_mount(j->cap);
	p->retry_ns = lc_now_ns() + (rc == -ECONNREFUSED || rc == -EPROTO ? ENG_RDMA_RETRY_NS
									  : ENG_RDMA_REDIAL_NS);
	if (rc)
		p->busy = 0;
	if (!rc && atomic_load(&r->cut)) /* as eng_rdma_cut would have */
		peer_cut(p);
	pthread_cond_broadcast(&r->freed);
	pthread_mutex_unlock(&r->lock);
	if (!rc) {
		LC_INFO(ENG_LOG, "RDMA to %s: %u queue pairs", p->endpoint, r->nqp);
		return p;
	}
	if (rc == -EKEYREJECTED) /* one stale grant, after a re-mount */
		LC_DEBUG(ENG_LOG, "RDMA to %s: the peer refused the grant; again in 1 s",
			 p->endpoint);
	else if (rc == -EHOSTDOWN) /* its transfers fail, and say so */
		LC_DEBUG(ENG_LOG, "RDMA to %s: nobody on its port; again in 1 s", p->endpoint);
	else
		LC_INFO(ENG_LOG, "RDMA to %s not set up (%s): TCP", p->endpoint,
			rc == -ECONNREFUSED
			    ? "the peer has no device or registered segment, or its "
			      "QPs did not connect"
			: rc == -EAGAIN ? "the peer is still registering its segment; again in 1 s"
					: strerror(-rc));
	peer_put(p);
	return NULL;
}

/* Whether p, not up, holds a set-up for a transfer under cap off: it is
 * being set up, or was refused lately. A refused grant (keyless, a writer
 * that slept through a re-mount; keyed, also one out of date or range)
 * holds off only transfers naming the same mount, for a second; the
 * others' grants may be the owner's now. Only the last refusal is kept:
 * transfers of two refused mounts in turn each try a set-up, and fail.
 * Lock held. */
static int holds_off(const struct eng_rdma_peer *p, const struct eng_cap *cap)
{
	if (p->state == PEER_CONNECTING)
		return 1;
	if (lc_now_ns() >= p->retry_ns)
		return 0;
	return !p->stale || p->mount == eng_cap_mount(cap);
}

/*
 * The QP set to run j on, with a reference and, keyed,
 * marked busy (peer_release); NULL: use TCP now (no RDMA with the peer, or
 * not yet). The first transfer to a peer sets one up; keyed, a transfer
 * that finds every set busy sets up the next, up to ENG_RDMA_CHANNELS, or
 * waits for one to be free until j's deadline (then NULL with *late set: the
 * transfer is out of time). None is set up while another is being set up
 * or the peer's last refusal holds this transfer off (holds_off); with no
 * set up yet, TCP.
 */
static struct eng_rdma_peer *peer_get(struct eng_engine *e, const struct rdma_job *j, int *late)
{
	unsigned max = e->keyed ? ENG_RDMA_CHANNELS : 1;
	struct eng_rdma *r = e->rdma;
	struct eng_rdma_peer *p, *redial;
	struct timespec ts;

	pthread_mutex_lock(&r->lock);
	for (;;) {
		int busy = 0, hold_off = 0;
		unsigned n = 0;

		redial = NULL;
		if (atomic_load(&r->cut)) { /* the engine is going */
			p = NULL;
			*late = 1;
			break;
		}
		for (p = r->peers; p; p = p->next) {
			if (strcmp(p->endpoint, j->endpoint))
				continue;
			n++;
			if (p->state == PEER_UP && !p->busy)
				break;
			if (p->state == PEER_UP)
				busy = 1;
			else if (holds_off(p, j->cap))
				hold_off = 1;
			else
				redial = p;
		}
		if (!p && !hold_off && !redial && n < max)
			redial = peer_new(r, j->endpoint);
		if (!p && !hold_off && redial) {
			p = redial;
			p->state = PEER_CONNECTING;
		}
		if (p || !busy)
			break;
		/* Every set busy: wait for one, as long as the transfer may. */
		lc_monotonic_at(&ts, j->deadline);
		if (pthread_cond_timedwait(&r->freed, &r->lock, &ts) == ETIMEDOUT) {
			*late = 1;
			break;
		}
	}
	if (p) {
		p->busy = e->keyed;
		atomic_fetch_add(&p->users, 1);
	}
	pthread_mutex_unlock(&r->lock);
	return p && p == redial ? peer_up(e, p, j) : p;
}

/* The transfer on p is over: a waiting one may take it. Keyed only. */
static void peer_release(struct eng_rdma *r, struct eng_rdma_peer *p)
{
	pthread_mutex_lock(&r->lock);
	p->busy = 0;
	pthread_cond_broadcast(&r->freed);
	pthread_mutex_unlock(&r->lock);
}

/* 1 when the owner hung up p's lifeline, which carries nothing between
 * transfers (keyless nothing after the set-up, keyed nothing but the
 * answer to each transfer it asks for): it fenced (a re-mount, also one
 * that kept its mount) or went away, and its side of the set went with it. */
static int lifeline_down(const struct eng_rdma_peer *p)
{
	struct pollfd f = {.fd = p->c->fd, .events = POLLRDHUP};

	return poll(&f, 1, 0) > 0;
}

/* peer_get, retiring each set it gives whose lifeline the owner hung up,
 * so that the first transfer after a fence takes a live set or sets up a
 * new one rather than fail on one the owner ended. The peer holds at most
 * ENG_RDMA_CHANNELS sets: a set still dead after that many is taken as is. */
static struct eng_rdma_peer *peer_take(struct eng_engine *e, const struct rdma_job *j, int *late)
{
	struct eng_rdma_peer *p = peer_get(e, j, late);

	for (int n = 0; p && n < ENG_RDMA_CHANNELS && lifeline_down(p); n++) {
		LC_DEBUG(ENG_LOG, "RDMA: %s ended one of our QP sets: another", j->endpoint);
		peer_retire(e->rdma, p);
		if (e->keyed)
			peer_release(e->rdma, p);
		peer_put(p);
		p = peer_get(e, j, late);
	}
	return p;
}

/* The local keys of iov's pieces into lkey[] (iovcnt at most
 * LUNAR_IOV_MAX): 0, or -ENOENT when a byte lies outside registered memory. */
static int local_keys(struct eng_rdma_dev *d, const struct iovec *iov, int iovcnt,
		      uint32_t lkey[LUNAR_IOV_MAX])
{
	uint32_t rkey;

	if (iovcnt > LUNAR_IOV_MAX)
		return -ENOENT;
	for (int i = 0; i < iovcnt; i++)
		if (iov[i].iov_len &&
		    eng_rdma_mem_keys(d, iov[i].iov_base, iov[i].iov_len, &lkey[i], &rkey))
			return -ENOENT;
	return 0;
}

/* Post the whole transfer (lkey[]: iov's local keys), then wait for every
 * piece; 0 or -errno. */
static int run(struct eng_rdma_peer *p, enum eng_dir dir, uint64_t off, const struct iovec *iov,
	       int iovcnt, const uint32_t *lkey, uint64_t deadline)
{
	struct eng_rdma_wait w;
	uint64_t raddr = p->raddr + off;
	int rc = 0, wrc;

	atomic_init(&w.left, 0);
	atomic_init(&w.failed, 0);
	for (int i = 0; i < iovcnt && !rc; i++) {
		if (iov[i].iov_len)
			rc = eng_rdma_qps_post(p->q, &w, -1, dir == ENG_WRITE, iov[i].iov_base,
					       iov[i].iov_len, lkey[i], raddr, p->rkey, deadline);
		raddr += iov[i].iov_len;
	}
	/* Even after a failed post: what was posted must finish first. */
	wrc = eng_rdma_qps_wait(p->q, &w, deadline);
	return rc ? rc : wrc;
}

/* iov as the pieces of a keyed transfer (rdma_int.h) into *x, with the
 * MRs their windows bind to: 0, or -ENOENT when memory is not open to the
 * owner or takes too many pieces. */
static int to_sges(struct eng_rdma_dev *d, enum eng_dir dir, const struct iovec *iov, int iovcnt,
		   struct eng_rdma_xf *x, struct ibv_mr *mr[ENG_RDMA_SGE_MAX])
{
	*x = (struct eng_rdma_xf){.cap_op = dir == ENG_WRITE ? ENG_OP_WRITE : ENG_OP_READ};
	for (int i = 0; i < iovcnt; i++) {
		const char *b = iov[i].iov_base;
		uint64_t n = iov[i].iov_len;
		struct ibv_mr *m = NULL;

		if (n && !(m = eng_rdma_mem_mr(d, b, n)))
			return -ENOENT;
		while (n) {
			uint32_t len = n > ENG_RDMA_PIECE_MAX ? ENG_RDMA_PIECE_MAX : (uint32_t)n;

			if (x->nsge == ENG_RDMA_SGE_MAX)
				return -ENOENT;
			mr[x->nsge] = m;
			x->sge[x->nsge++] = (struct eng_rdma_sge){(uintptr_t)b, len, 0};
			b += len;
			n -= len;
		}
	}
	return 0;
}

/* Where a piece of len bytes is cut in two: halves of ENG_RDMA_SPREAD_MIN
 * bytes at least (the piece holds twice that). */
#define ENG_RDMA_SPREAD_MIN (64u << 10)
static uint32_t cut_at(uint32_t len)
{
	return len / 2 & ~(ENG_RDMA_SPREAD_MIN - 1);
}

/* Cut piece j of x in two at cut_at; mr follows. */
static void cut(struct eng_rdma_xf *x, struct ibv_mr *mr[ENG_RDMA_SGE_MAX], unsigned j)
{
	uint32_t half = cut_at(x->sge[j].len);
	unsigned tail = x->nsge - j - 1;

	memmove(&x->sge[j + 2], &x->sge[j + 1], tail * sizeof(x->sge[0]));
	x->sge[j + 1] = (struct eng_rdma_sge){x->sge[j].addr + half, x->sge[j].len - half, 0};
	x->sge[j].len = half;
	x->nsge++;
	memmove(&mr[j + 2], &mr[j + 1], tail * sizeof(mr[0]));
	mr[j + 1] = mr[j];
}

/* How unevenly x's pieces would load nqp QPs were piece j cut (j ==
 * x->nsge: as they are): the sum of the squares of each QP's bytes (in
 * floating point: 16 pieces of 2 GiB overflow 64 bits). A cut moves every
 * later piece to the next QP. */
static double qp_spread_cost(const struct eng_rdma_xf *x, unsigned nqp, unsigned j)
{
	double load[ENG_RDMA_QP_MAX] = {0}, cost = 0;

	for (unsigned i = 0; i < x->nsge; i++) {
		uint32_t len = x->sge[i].len, half = i == j ? cut_at(len) : len;

		load[(i + (i > j)) % nqp] += half;
		load[(i + 1) % nqp] += len - half;
	}
	for (unsigned q = 0; q < nqp; q++)
		cost += load[q] * load[q];
	return cost;
}

/* A piece's bytes go on one QP (eng_rdma_piece_qp): make the cut that
 * evens the QPs' bytes most, while one does and pieces are left. */
static void spread(struct eng_rdma_xf *x, struct ibv_mr *mr[ENG_RDMA_SGE_MAX], unsigned nqp)
{
	while (x->nsge < ENG_RDMA_SGE_MAX) {
		double best = qp_spread_cost(x, nqp, x->nsge);
		int at = -1;

		for (unsigned j = 0; j < x->nsge; j++) {
			double c;

			if (x->sge[j].len < 2 * ENG_RDMA_SPREAD_MIN)
				continue;
			c = qp_spread_cost(x, nqp, j);
			if (c < best) {
				best = c;
				at = (int)j;
			}
		}
		if (at < 0)
			return;
		cut(x, mr, (unsigned)at);
	}
}

/* Send the keyed transfer request for x and take the owner's answer:
 * 0 and *rep, or -errno. */
static int exchange_xfer(struct eng_engine *e, struct eng_rdma_peer *p, const struct eng_rdma_xf *x,
			 uint64_t off, uint64_t total, const struct eng_cap *cap, uint32_t crc,
			 uint64_t deadline, struct eng_wire_rep *rep)
{
	struct eng_wire_req req = request(e, ENG_OP_RDMA_XFER, off, total);
	unsigned char body[ENG_RDMA_XF_SIZE];
	int rc, replied;
	uint64_t ctr;

	eng_rdma_xf_encode(x, body);
	rc = eng_send_req(p->c, &req, cap, crc, body, sizeof(body), 0, deadline, &ctr);
	if (!rc)
		rc = eng_recv_rep(p->c, ctr, rep, deadline, &replied);
	if (!rc && (rep->magic != ENG_WIRE_REP_MAGIC || rep->id != req.id))
		rc = -EPROTO;
	return rc;
}

/*
 * Ask p's owner (p busy: ours) for the keyed transfer x of [off, off + total) under cap
 * (crc: a WRITE's payload CRC32C, which the owner checks): it moves the
 * bytes with its QPs and answers once they are in place. With memory
 * windows, x's pieces are opened to the owner for this transfer only.
 * 0 or -errno (-EBADMSG: a WRITE the owner found unlike crc, the set
 * still good); after an error our QPs are fenced, so the owner can no
 * longer touch the memory the caller gets back.
 */
static int ask(struct eng_engine *e, struct eng_rdma_peer *p, struct eng_rdma_xf *x,
	       struct ibv_mr *const mr[], uint64_t off, uint64_t total, const struct eng_cap *cap,
	       uint32_t crc, uint64_t deadline)
{
	struct eng_wire_rep rep;
	int rc, closed;

	rc = eng_rdma_qps_open(p->q, x, mr, deadline);
	if (!rc)
		rc = exchange_xfer(e, p, x, off, total, cap, crc, deadline, &rep);
	/* Whatever came of it: the windows close before the memory goes back
	 * (when that fails, the QPs are fenced; an answer still tells), in a
	 * time of their own: an answer near the deadline is still good. */
	closed = eng_rdma_qps_close(p->q, lc_now_ns() + ENG_RDMA_CLOSE_NS);
	if (closed && !rc && !rep.status)
		rc = closed;
	if (rc) {
		eng_rdma_qps_fence(p->q);
		return rc;
	}
	if (rep.status) {
		LC_DEBUG(ENG_LOG, "RDMA transfer refused by %s: %d", p->endpoint, rep.status);
		/* The owner serves on after a WRITE unlike its CRC32C: the set
		 * stays, unless its windows could not close (QPs fenced). */
		if (rep.status == LUNAR_ERR_CHECKSUM_MISMATCH && x->cap_op == ENG_OP_WRITE &&
		    !closed)
			return -EBADMSG;
		return eng_refusal(rep.status);
	}
	return rep.length == total ? 0 : -EPROTO;
}

/* A transfer whose time ran out before it began (queued behind others,
 * waiting for a QP set, or its engine going): nothing went, and no QP set
 * is torn down for it. */
static int too_late(struct eng_engine *e, uint64_t total)
{
	LC_DEBUG(ENG_LOG, "RDMA transfer out of time before it began");
	eng_xfer_count(e, ENG_TR_RDMA, total, ENG_XFER_UNSENT);
	return ENG_XFER_UNSENT;
}

/* j over TCP, by the same deadline. */
static int tcp_instead(struct eng_engine *e, const struct rdma_job *j)
{
	int rc;

	if (atomic_load(&e->rdma->cut)) /* the engine is going */
		return too_late(e, j->total);
	atomic_fetch_add(&e->rdma->fallbacks, 1);
	rc = eng_tcp_ops.xfer(e, j->endpoint, j->dir, j->off, j->iov, j->iovcnt, j->total, j->cap,
			      j->crc, j->deadline, j->live);
	eng_xfer_count(e, ENG_TR_TCP, j->total, rc);
	return rc;
}

/*
 * Keyless, a QP set serves ranges of the mount it was set up under only
 * (the owner checked that one, and its fence ends the set): for a range of
 * another, which of the two is the owner's now, the owner says over TCP.
 * When it takes the transfer there, the set is of an older mount: retired,
 * the next transfer sets up a new one. Drops our reference to p.
 */
static int other_mount(struct eng_engine *e, struct eng_rdma_peer *p, const struct rdma_job *j)
{
	int rc = tcp_instead(e, j);

	if (!rc)
		peer_retire(e->rdma, p);
	peer_put(p);
	return rc;
}

/* Whether the transfer that failed with rc on p failed because p's owner
 * ended the set under it (a fence, or its departure, after peer_take
 * looked at the lifeline): it broke the set, not on a refusal or a
 * protocol fault, the owner has hung up, and time is left. */
static int ended_under(const struct eng_rdma_peer *p, int rc, uint64_t deadline)
{
	return rc != -ERANGE && rc != -EKEYREJECTED && rc != -EPROTO &&
	       atomic_load(&p->q->broken) && lifeline_down(p) && lc_now_ns() < deadline;
}

/*
 * Run j on a QP set of its endpoint's, or over TCP when there is none.
 * With may_retry, a run that failed on a set its owner ended under it
 * (ended_under) is not counted and returns -ESTALE: the caller runs it
 * again, and that run's connect tells the owner's mount from the old one.
 */
static int on_set(struct eng_engine *e, struct rdma_job *j, int may_retry)
{
	struct eng_rdma *r = e->rdma;
	struct eng_rdma_peer *p;
	uint32_t wcrc = 0;
	int rc, late = 0, ended = 0;

	if (!(p = peer_take(e, j, &late)))
		return late ? too_late(e, j->total) : tcp_instead(e, j);
	if (lc_now_ns() >= j->deadline) {
		if (e->keyed)
			peer_release(r, p);
		peer_put(p);
		return too_late(e, j->total);
	}
	if (!e->keyed && p->mount != eng_cap_mount(j->cap))
		return other_mount(e, p, j);
	/* The owner checks a keyed WRITE's bytes against their CRC32C. */
	if (e->keyed && j->dir == ENG_WRITE)
		wcrc = eng_iov_crc(j->iov, j->iovcnt, 0, j->total);
	/* The owner's data port would refuse it: so do we, before a byte moves. */
	if (j->off > p->rlen || j->total > p->rlen - j->off)
		rc = -ERANGE;
	else if (e->keyed)
		rc = ask(e, p, &j->x, j->mr, j->off, j->total, j->cap, wcrc, j->deadline);
	else
		rc = run(p, j->dir, j->off, j->iov, j->iovcnt, j->lkey, j->deadline);
	if (rc && rc != -ERANGE && rc != -EBADMSG) { /* those two leave the set as it was */
		LC_DEBUG(ENG_LOG, "RDMA transfer with %s failed: %s", j->endpoint, strerror(-rc));
		ended = ended_under(p, rc, j->deadline);
		peer_retire(r, p); /* a new connection next time */
	}
	if (e->keyed)
		peer_release(r, p);
	peer_put(p);
	if (ended && may_retry)
		return -ESTALE;
	eng_xfer_count(e, ENG_TR_RDMA, j->total, rc);
	if (rc)
		return eng_xfer_failed(rc, 1);
	/* The NIC moved the bytes: one pass over them here. */
	if (j->crc)
		*j->crc = e->keyed && j->dir == ENG_WRITE
			      ? wcrc
			      : eng_iov_crc(j->iov, j->iovcnt, 0, j->total);
	return 0;
}

static int rdma_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		     const struct iovec *iov, int iovcnt, uint64_t total, const struct eng_cap *cap,
		     uint32_t *crc, uint64_t deadline, int *live)
{
	struct rdma_job j = {.endpoint = endpoint,
			     .dir = dir,
			     .off = off,
			     .total = total,
			     .iov = iov,
			     .iovcnt = iovcnt,
			     .cap = cap,
			     .crc = crc,
			     .deadline = deadline,
			     .live = live};
	int rc;

	if (e->keyed && !cap)
		return ENG_XFER_UNSENT; /* as over TCP: the owner would refuse it */
	if (lc_now_ns() >= deadline)
		return too_late(e, total);
	if (e->keyed ? to_sges(e->rdma->dev, dir, iov, iovcnt, &j.x, j.mr) != 0
		     : local_keys(e->rdma->dev, iov, iovcnt, j.lkey) != 0)
		return tcp_instead(e, &j);
	if (e->keyed)
		spread(&j.x, j.mr, e->rdma->nqp);
	rc = on_set(e, &j, 1);
	if (rc != -ESTALE)
		return rc;
	/* Once more: whatever the ended set moved, this run moves it all. Some
	 * bytes of the first may have gone: "unsent" no longer holds. */
	rc = on_set(e, &j, 0);
	return rc == ENG_XFER_UNSENT ? LUNAR_ERR_TRANSFER_FAIL : rc;
}

/* Register the segment beside serving: pinning a large one takes seconds. */
static void *seg_register(void *arg)
{
	struct eng_engine *e = arg;
	uint64_t t0 = lc_now_ms();
	int rc = eng_rdma_seg_register(e->rdma->dev, e->cfg.seg_base, e->cfg.seg_size);

	if (rc)
		LC_WARN(ENG_LOG, "RDMA: cannot register the %llu-byte segment (%s): peers use TCP",
			(unsigned long long)e->cfg.seg_size, strerror(-rc));
	else
		LC_INFO(ENG_LOG, "RDMA: segment registered (%llu ms)",
			(unsigned long long)(lc_now_ms() - t0));
	return NULL;
}

int eng_rdma_init(struct eng_engine *e)
{
	const char *spec = e->cfg.rdma_devices;
	struct eng_rdma *r;
	int rc;

	e->cfg.rdma_devices = NULL; /* the caller's string: not kept */
	if (!spec || !*spec || !strcmp(spec, "none"))
		return 0;
	r = calloc(1, sizeof(*r));
	if (!r)
		return LUNAR_ERR_INTERNAL;
	rc = eng_rdma_dev_open(spec, e->keyed, &r->dev);
	if (rc) {
		free(r);
		if (!strcmp(spec, "auto")) {
			LC_INFO(ENG_LOG, "no RDMA device (%s): transfers use TCP", strerror(-rc));
			return 0;
		}
		LC_ERROR(ENG_LOG, "RDMA devices \"%s\": none usable (%s)", spec, strerror(-rc));
		return -ENODEV;
	}
	if (e->keyed && !r->dev->windows) {
		/* A type 1 window or an open MR would let any owner with a QP
		 * set of ours reach memory a transfer opened to another. */
		LC_WARN(ENG_LOG,
			"RDMA device %s binds no type 2 memory windows, which a keyed "
			"cluster needs to open a transfer's memory to its owner alone: "
			"transfers use TCP",
			r->dev->name);
		eng_rdma_dev_put(r->dev);
		free(r);
		return 0;
	}
	r->nqp = e->cfg.rdma_qps ? e->cfg.rdma_qps : ENG_RDMA_QPS_DEFAULT;
	if (r->nqp > ENG_RDMA_QP_MAX)
		r->nqp = ENG_RDMA_QP_MAX;
	pthread_mutex_init(&r->lock, NULL);
	lc_cond_init(&r->freed);
	atomic_init(&r->fallbacks, 0);
	atomic_init(&r->cut, 0);
	e->rdma = r;
	LC_INFO(ENG_LOG, "RDMA device %s (%u QPs a set)", r->dev->name, r->nqp);
	if (e->cfg.seg_size)
		r->seg_thread_started = !pthread_create(&r->seg_thread, NULL, seg_register, e);
	if (e->cfg.seg_size && !r->seg_thread_started)
		LC_WARN(ENG_LOG, "RDMA: no thread to register the segment: peers use TCP");
	if (!r->seg_thread_started)
		eng_rdma_seg_fail(r->dev);
	return 0;
}

void eng_rdma_cut(struct eng_engine *e)
{
	struct eng_rdma *r = e->rdma;

	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	atomic_store(&r->cut, 1);
	/* Linked, a set is the list's; up, its QPs and lifeline are fixed. */
	for (struct eng_rdma_peer *p = r->peers; p; p = p->next)
		if (p->state == PEER_UP)
			peer_cut(p);
	pthread_cond_broadcast(&r->freed); /* transfers waiting for a set */
	pthread_mutex_unlock(&r->lock);
}

void eng_rdma_fini(struct eng_engine *e)
{
	struct eng_rdma *r = e->rdma;

	if (!r)
		return;
	if (r->seg_thread_started)
		pthread_join(r->seg_thread, NULL); /* a registration cannot be cut short */
	while (r->peers)
		peer_retire(r, r->peers);
	pthread_cond_destroy(&r->freed);
	pthread_mutex_destroy(&r->lock);
	eng_rdma_dev_put(r->dev);
	free(r);
	e->rdma = NULL;
}

const struct eng_transport_ops eng_rdma_ops = {
    .xfer = rdma_xfer,
};
