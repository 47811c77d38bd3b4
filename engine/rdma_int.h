/*
 * rdma_int.h - the RDMA transport's internals (SPEC §7): the connection
 * handshake frame exchanged on the data port, the opened device with its
 * registered memory, and sets of RC queue pairs. rdma_wire.c encodes and
 * validates the frame, rdma_dev.c opens the device and registers memory,
 * rdma_qp.c drives queue pairs, rdma.c is the client side (peers, slicing,
 * TCP fallback), rdma_srv.c the owner's answer to a connect request.
 * Never included from outside engine/ (tests excepted).
 */
#ifndef LUNAR_ENGINE_RDMA_INT_H
#define LUNAR_ENGINE_RDMA_INT_H

#include "eng_int.h"
#include "ibv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The connect frame's body, version 1: 120 bytes, little-endian, no
 * padding. The client sends it after an ENG_OP_RDMA_CONNECT request header
 * (eng_int.h); the owner answers with a reply header and, on status 0, its
 * own body.
 *    0 u32 magic    ENG_RDMA_HS_MAGIC        48 u32 rkey    owner: the segment's
 *    4 u16 version  ENG_RDMA_HS_VERSION                     (keyed 0); client: 0
 *    6 u16 nqp      QPs, 1..ENG_RDMA_QP_MAX  52 u32 reserved 0
 *    8 u8  mtu      enum ibv_mtu, 1..5       56 ENG_RDMA_QP_MAX entries of
 *    9 u8  port     the device port, >= 1       u32 qpn  1..2^24-1, distinct
 *   10 u16 lid      IB LID (0 on RoCE)          u32 psn  0..2^24-1
 *   12 u16 cap_op   client: READ or WRITE,      the first nqp used, the rest 0
 *                   what the header's capability grants; owner: 0
 *   14 u16 flags    0
 *   16 16 bytes gid (all zero on IB without a GRH; then lid != 0)
 *   32 u64 addr     owner: the segment's address in its MR (keyed 0); client: 0
 *   40 u64 length   owner: the segment's length (> 0); client: 0
 */
#define ENG_RDMA_HS_MAGIC   0x44524e4cu /* "LNRD" */
#define ENG_RDMA_HS_VERSION 2		/* 2: keyed pieces go on QP i mod nqp (type 2 windows) */
#define ENG_RDMA_QP_MAX	    8
#define ENG_RDMA_HS_HEAD    56
#define ENG_RDMA_HS_SIZE    (ENG_RDMA_HS_HEAD + 8 * ENG_RDMA_QP_MAX)
#define ENG_RDMA_QPN_MAX    0xffffffu

/* The body decoded, host order. */
struct eng_rdma_hs {
	uint16_t nqp;
	uint8_t mtu;
	uint8_t port;
	uint16_t lid;
	uint16_t cap_op;
	uint8_t gid[16];
	uint64_t addr;
	uint64_t length;
	uint32_t rkey;
	uint32_t qpn[ENG_RDMA_QP_MAX];
	uint32_t psn[ENG_RDMA_QP_MAX];
};

/* eng_rdma_hs_encode - h into the ENG_RDMA_HS_SIZE bytes of out (unused QP
 * slots and reserved words zero). Any thread. */
void eng_rdma_hs_encode(const struct eng_rdma_hs *h, unsigned char *out);
/*
 * eng_rdma_hs_decode - validate len untrusted bytes of buf as a body sent
 * by the owner (from_owner) or by a client, into *out. 0, or
 * LUNAR_ERR_PROTOCOL (wrong length, magic, counts, values out of range,
 * non-zero reserved bytes, a segment range that wraps, fields the sender's
 * side must leave zero) or LUNAR_ERR_VERSION_MISMATCH. Never reads past
 * len; *out is written only on success. Any thread.
 */
int eng_rdma_hs_decode(const unsigned char *buf, size_t len, int from_owner,
		       struct eng_rdma_hs *out);
/*
 * The transfer frame's body, version 1 (keyed engines only: ENG_OP_RDMA_XFER
 * on a connection whose connect succeeded; docs/protocol.md): ENG_RDMA_XF_SIZE
 * bytes, little-endian. The owner moves the bytes with its own QPs, so its
 * segment is never open to remote access and each transfer is checked
 * against its capability, as over TCP.
 *    0 u16 cap_op   READ: the owner RDMA WRITEs [offset, offset + length)
 *                   of its segment into the SGEs; WRITE: it RDMA READs the
 *                   SGEs into that range (what the capability grants)
 *    2 u16 nsge     1..ENG_RDMA_SGE_MAX
 *    4 u32 reserved 0
 *    8 ENG_RDMA_SGE_MAX entries of {u64 addr, u32 len, u32 rkey}: the
 *      client's registered memory, in order; the first nsge used (len > 0,
 *      addr + len does not wrap), the rest all zero
 * The used lengths sum to the request header's length.
 */
#define ENG_RDMA_SGE_MAX   16
#define ENG_RDMA_PIECE_MAX (1u << 31) /* a piece's most bytes: a window's (mlx5) */
#define ENG_RDMA_XF_HEAD   8
#define ENG_RDMA_XF_SIZE   (ENG_RDMA_XF_HEAD + 16 * ENG_RDMA_SGE_MAX)

struct eng_rdma_sge {
	uint64_t addr;
	uint32_t len;
	uint32_t rkey;
};

struct eng_rdma_xf {
	uint16_t cap_op;
	uint16_t nsge;
	struct eng_rdma_sge sge[ENG_RDMA_SGE_MAX];
};

/* eng_rdma_xf_encode - x into the ENG_RDMA_XF_SIZE bytes of out. Any thread. */
void eng_rdma_xf_encode(const struct eng_rdma_xf *x, unsigned char *out);
/*
 * eng_rdma_xf_decode - validate len untrusted bytes of buf as a transfer
 * body for a request of total bytes, into *out: 0, or LUNAR_ERR_PROTOCOL
 * (wrong length, op, counts, an entry empty or wrapping, non-zero unused
 * bytes, lengths that do not sum to total). Never reads past len; *out is
 * written only on success. Any thread.
 */
int eng_rdma_xf_decode(const unsigned char *buf, size_t len, uint64_t total,
		       struct eng_rdma_xf *out);

/* Registered memory (eng_mem_add): a range and its MR. */
struct eng_rdma_dev;
struct eng_mem {
	struct eng_mem *next, *prev;
	struct eng_rdma_dev *dev;
	char *base;
	uint64_t len;
	struct ibv_mr *mr;
	uint32_t lkey, rkey;
	int remote; /* open to the peer's RDMA READ and WRITE: through the MR's
		     * rkey, or with dev->windows through a window a transfer binds */
};

/*
 * The opened device: one port, a protection domain, the engine's segment
 * as an MR and the list of other registered ranges. Reference-counted: the
 * engine holds one reference and every eng_mem one, so a client region
 * deregistered after the engine stopped still finds its device.
 */
struct eng_rdma_dev {
	atomic_int refs;
	struct eng_ibv ibv;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[64];
	uint8_t port;
	uint8_t mtu;
	uint16_t lid;
	int gid_index;
	uint8_t gid[16];
	unsigned max_rd_atom; /* RDMA READs in flight per QP, both directions */
	struct eng_mem seg;   /* the engine's segment, once ENG_SEG_READY */
	atomic_int seg_state; /* enum eng_seg_state */
	pthread_rwlock_t mem_lock;
	struct eng_mem *mems;
	int keyed;   /* eng_rdma_dev_open's keyed */
	int windows; /* keyed, and the device binds type 2 memory windows */
	int refuse;  /* test hook: $LUNAR_RDMA_DEBUG_REFUSE, answer every connect no */
};

/*
 * eng_rdma_dev_open - open the device named by spec ("auto": the first
 * device with an active port; else a comma-separated list of device names,
 * each optionally ":port", the first that opens with an active port). On a
 * keyed engine (keyed) owners move the bytes: the segment will be
 * registered for local access only, and client memory open to the owner
 * only through the windows a transfer binds (eng_rdma_qps_open), never
 * through the MR's own rkey; d->windows says whether the device binds
 * type 2 windows, without which a keyed engine does not use it
 * (eng_rdma_init).
 * 0 and *out (one reference), -ENOENT when no library or no such device
 * (no active port), or -errno of the verbs. Blocks; engine create only.
 */
int eng_rdma_dev_open(const char *spec, int keyed, struct eng_rdma_dev **out);
/* Where the registration of d's segment stands. */
enum eng_seg_state {
	ENG_SEG_PENDING, /* not done yet: the owner answers connects "not yet" */
	ENG_SEG_READY,	 /* d->seg is published */
	ENG_SEG_FAILED,	 /* it never will be: the owner answers connects "no" */
};
/*
 * eng_rdma_seg_register - register [base, base + len) as d's segment (open
 * to the peers' RDMA READ and WRITE, or keyed local only) and publish it.
 * Registering pins every page, seconds for a large segment: the engine
 * runs it beside serving (rdma.c), and until it is done the owner answers
 * connects "not yet" (peers use TCP meanwhile). 0 (ENG_SEG_READY), or
 * -errno (ENG_SEG_FAILED). Once per device, while ENG_SEG_PENDING.
 * eng_rdma_seg_fail - ENG_SEG_FAILED: no segment, or no thread to register
 * it; instead of eng_rdma_seg_register.
 * eng_rdma_seg_state - the enum eng_seg_state (an acquire: at
 * ENG_SEG_READY d->seg may be read). Any thread.
 */
int eng_rdma_seg_register(struct eng_rdma_dev *d, void *base, uint64_t len);
void eng_rdma_seg_fail(struct eng_rdma_dev *d);
int eng_rdma_seg_state(struct eng_rdma_dev *d);
/* eng_rdma_dev_put - drop a reference; the last deregisters the segment,
 * frees the PD, closes the device. NULL ok. */
void eng_rdma_dev_put(struct eng_rdma_dev *d);
/*
 * eng_rdma_mem_keys - the keys of registered memory holding all of
 * [p, p + len): the segment's or an eng_mem's; 0 and *lkey, *rkey, or
 * -ENOENT. Any thread (a read lock).
 */
int eng_rdma_mem_keys(struct eng_rdma_dev *d, const void *p, uint64_t len, uint32_t *lkey,
		      uint32_t *rkey);
/* eng_rdma_mem_mr - the MR of client memory (an eng_mem open to the peer)
 * holding all of [p, p + len), or NULL. Any thread (a read lock). */
struct ibv_mr *eng_rdma_mem_mr(struct eng_rdma_dev *d, const void *p, uint64_t len);

/*
 * A set of RC queue pairs to one peer, sharing a completion queue and its
 * event channel. Each QP has ENG_RDMA_SQ_DEPTH send credits; a posted work
 * request takes one and its completion gives it back.
 */
#define ENG_RDMA_SQ_DEPTH 128
struct eng_rdma_qps {
	struct eng_rdma_dev *dev;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	int nqp;
	struct ibv_qp *qp[ENG_RDMA_QP_MAX];
	atomic_int credits[ENG_RDMA_QP_MAX];
	atomic_uint next;	   /* round robin over the QPs */
	atomic_int broken;	   /* a completion failed or a QP was forced to ERR */
	pthread_mutex_t poll_lock; /* whoever holds it polls the CQ for all */
	pthread_mutex_t wait_lock;
	pthread_cond_t wait_cond; /* broadcast after completions were dispatched */
	int armed;		  /* under poll_lock: a notification was requested */
	/* -1, or a socket whose hang-up breaks the set (its waits look when
	 * they sleep): the lifeline of a keyless client's set, which carries
	 * nothing after the set-up, so that a transfer to an owner that went
	 * away fails then, not at its deadline; the lifeline of a keyed
	 * owner's set, quiet while the owner moves a transfer's bytes, so
	 * that the transfer ends at once when the client goes or the owner's
	 * fence shuts it down. Set before the set's first transfer. */
	int watch_fd;
	/* With dev->windows, on a keyed client's set: one type 2 window per
	 * piece of a transfer, bound for its length only, on its piece's QP
	 * (eng_rdma_qps_open); its rkey is the one it was last bound under.
	 * The first nbound had their binds posted by the last open. */
	struct ibv_mw *mw[ENG_RDMA_SGE_MAX];
	unsigned nbound;
};

/* eng_rdma_piece_qp - the QP of q that carries piece i of a keyed transfer:
 * the client binds the piece's window on it and the owner posts the
 * piece's requests on its own QP i mod nqp, connected to it (a type 2
 * window serves requests coming in on the QP it was bound on only). */
static inline int eng_rdma_piece_qp(const struct eng_rdma_qps *q, unsigned i)
{
	return (int)(i % (unsigned)q->nqp);
}

/* A transfer's outstanding work requests; on the caller's stack. */
struct eng_rdma_wait {
	atomic_uint left;
	atomic_int failed;
} __attribute__((aligned(8)));

/*
 * eng_rdma_qps_create - nqp (1..ENG_RDMA_QP_MAX) QPs in INIT, a CQ and a
 * completion channel on d; remote: they accept the peer's RDMA READ and
 * WRITE (a keyless owner's QPs, a keyed client's, which also gets its
 * windows when d->windows). Fills
 * the local half of *mine (nqp, mtu, port, lid, gid, qpn, psn). 0 and *out,
 * or -errno. Any thread.
 * eng_rdma_qps_connect - move every QP to RTR then RTS towards the peer's
 * peer->qpn[i] / psn[i], path MTU the smaller of both. 0 or -errno.
 * eng_rdma_qps_destroy - destroy the QPs, the CQ, the channel; NULL ok.
 * Only once no transfer uses q.
 */
int eng_rdma_qps_create(struct eng_rdma_dev *d, int nqp, int remote, struct eng_rdma_qps **out,
			struct eng_rdma_hs *mine);
int eng_rdma_qps_connect(struct eng_rdma_qps *q, const struct eng_rdma_hs *mine,
			 const struct eng_rdma_hs *peer);
void eng_rdma_qps_destroy(struct eng_rdma_qps *q);
/*
 * eng_rdma_qps_post - post signaled RDMA READs (write 0) or WRITEs of
 * [local, local + len) (lkey) from/to raddr (rkey), cut in ENG_RDMA_CHUNK
 * pieces, all on QP qp (0..nqp-1), or with qp < 0 spread over the QPs
 * with credits, counted in *w. Waits (making progress on completions)
 * while the queue is full, until deadline_ns. 0, -ETIMEDOUT or -errno (the
 * pieces from the failed one on were not posted; those before were, and
 * must be waited for).
 */
#define ENG_RDMA_CHUNK (1u << 20) /* bytes of one work request */
int eng_rdma_qps_post(struct eng_rdma_qps *q, struct eng_rdma_wait *w, int qp, int write,
		      void *local, uint64_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		      uint64_t deadline_ns);
/*
 * eng_rdma_qps_wait - until every request of *w completed: polls, then
 * waits on the event channel. 0 when all succeeded; -EIO when one failed,
 * -ETIMEDOUT at deadline_ns. After a failure or a timeout the QPs are
 * forced to the error state and the flushed requests are waited for, so
 * when this returns no request of w can still touch local memory.
 */
int eng_rdma_qps_wait(struct eng_rdma_qps *q, struct eng_rdma_wait *w, uint64_t deadline_ns);
/*
 * eng_rdma_qps_fence - force every QP of q to the error state: requests
 * outstanding complete as flushed, and no request of ours or of the peer
 * touches memory through them afterwards. q is unusable after. Any thread.
 */
void eng_rdma_qps_fence(struct eng_rdma_qps *q);
/*
 * eng_rdma_qps_open - bind type 2 window i of q (d->windows) on QP
 * eng_rdma_piece_qp(q, i) to exactly x->sge[i], which lies in mr[i]
 * (eng_rdma_mem_mr), for the owner's RDMA WRITE into it (x->cap_op READ:
 * a get) or its RDMA READ from it (a put), and put the window's new rkey
 * in x->sge[i].rkey; waits for the binds. 0, or -errno (some may be
 * bound: close them).
 * eng_rdma_qps_close - invalidate the windows the last open bound (or
 * posted a bind for) on their QPs and wait: afterwards their rkeys reach
 * nothing. When that fails (q broken, or a window whose bind failed) the
 * QPs are fenced and the windows freed. 0 or -errno. The owner of q's
 * only transfer.
 */
int eng_rdma_qps_open(struct eng_rdma_qps *q, struct eng_rdma_xf *x, struct ibv_mr *const mr[],
		      uint64_t deadline_ns);
int eng_rdma_qps_close(struct eng_rdma_qps *q, uint64_t deadline_ns);

/* The transport's state in an engine (rdma.c): the device and the peers.
 * Keyed, the owner serves one transfer at a time on each QP set a peer
 * connects, so a peer has up to ENG_RDMA_CHANNELS sets; keyless, one. */
#define ENG_RDMA_CHANNELS 4
struct eng_rdma_peer;
struct eng_rdma {
	struct eng_rdma_dev *dev;
	unsigned nqp; /* QPs per set */
	pthread_mutex_t lock;
	pthread_cond_t freed; /* keyed: a QP set is free, or its set-up ended */
	struct eng_rdma_peer *peers;
	atomic_uint_fast64_t fallbacks; /* transfers that went over TCP instead */
	pthread_t seg_thread;		/* runs eng_rdma_seg_register */
	int seg_thread_started;
	atomic_int cut; /* eng_rdma_cut came: no transfer starts */
};

/*
 * eng_rdma_init - open the devices of e->cfg.rdma_devices (NULL, "" or
 * "none": none; e->rdma stays NULL). "auto" finding none is not an error.
 * 0, or -ENODEV when named devices cannot be used.
 * eng_rdma_fini - close every peer and drop the device. Engine only.
 */
int eng_rdma_init(struct eng_engine *e);
void eng_rdma_fini(struct eng_engine *e);
/*
 * eng_rdma_cut - the engine is going: transfers under way on a QP set fail
 * at once rather than at their deadline (its QPs fenced, its lifeline shut
 * down, so that a keyed transfer's wait for the owner's answer ends too),
 * and none starts any more, over RDMA or TCP instead (out of time,
 * unsent); a set being set up is fenced once up. One that went over TCP
 * instead before is cut as TCP transfers are (eng_exec_stop). Engine
 * only, before eng_exec_stop joins its threads.
 */
void eng_rdma_cut(struct eng_engine *e);
/*
 * eng_rdma_serve - answer the ENG_OP_RDMA_CONNECT request k (decoded; the
 * keyed header when q->s, else its plain part) whose body is body (keyed:
 * read and MAC-checked already; keyless: NULL, read here). Refuses a
 * malformed body or range (close), answers "no" (status
 * UNAVAILABLE_IN_CURRENT_STATUS, connection kept) without a device or when
 * the QPs cannot be connected; else replies with its own body and keeps
 * the QPs until the peer closes the connection (keyed, or until the server
 * takes its slot back between transfers). 0 to go on, < 0 to close.
 * Data-port thread.
 */
int eng_rdma_serve(struct eng_engine *e, const struct eng_srv_req *q, struct eng_wire_kreq *k,
		   const unsigned char *body, uint64_t deadline_ns);

/* eng_xfer_count - account one transfer of bytes on transport t (rc: its
 * result). Any thread. */
void eng_xfer_count(struct eng_engine *e, enum eng_transport t, uint64_t bytes, int rc);

extern const struct eng_transport_ops eng_rdma_ops;

#endif /* LUNAR_ENGINE_RDMA_INT_H */
