/*
 * tcp.c - the TCP transport: one request/reply per pooled connection (wire
 * format in eng_int.h), the caller's iovecs handed straight to the socket.
 * A transfer above ENG_SLICE_MIN is cut into a few slices (at most
 * eng_config.slices), which the engine's I/O threads (aio.c) and the
 * caller run on connections of their own in parallel. A CRC32C the caller asks for is computed
 * beside the socket I/O, a chunk at a time while the bytes are in the cache, each slice its own;
 * the slices' CRCs are then combined (lc_crc32c_combine), never a second pass over the bytes. On a
 * keyed engine a new connection first passes the handshake, and each
 * request carries the capability, the payload's CRC32C and a MAC; each
 * reply's MAC is checked. A keyed WRITE whose CRC32C the caller did not
 * give goes as frames of ENG_WRITE_FRAME bytes on its connection, each
 * naming its own bytes' CRC32C (write_frames).
 */
#include "eng_int.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "crc32c.h"
#include "lunar.h"

/* One slice of an op being run: [skip, skip + len) of its iov. */
struct tcp_slice {
	struct eng_engine *e;
	struct eng_op *op;
	unsigned idx; /* in op's slices */
	uint64_t skip;
	uint64_t len;
	uint32_t crc;  /* keyed WRITE: CRC32C of this slice's bytes (sent in the header) */
	int framed;    /* keyed WRITE, crc ours to compute: in frames (write_frames) */
	int fuse_crc;  /* op wants a CRC: this slice's computed on the way */
	uint32_t ocrc; /* fused: the slice's CRC32C */
	int *live;     /* where to publish the socket while it runs, or NULL */
};

/* Encode req for c into *k, as eng_send_req sends it (all of it, keyed or
 * not: a keyless request names cap's mount and leaves the rest zero). */
static void req_build(struct eng_cconn *c, const struct eng_wire_req *req,
		      const struct eng_cap *cap, uint32_t crc, const void *name, size_t nlen,
		      struct eng_wire_kreq *k, uint64_t *ctr)
{
	*k = (struct eng_wire_kreq){.h = *req};
	*ctr = 0;
	if (!c->keyed) {
		k->h.version = ENG_WIRE_VERSION;
		k->mount = htole64(eng_cap_mount(cap));
		eng_wire_req_encode(&k->h);
		return;
	}
	k->h.version = ENG_WIRE_VERSION_KEYED;
	k->crc = crc;
	if (cap) {
		k->cap_offset = cap->offset;
		k->cap_length = cap->length;
		k->cap_version = cap->version;
		k->cap_expiry_ms = cap->expiry_ms;
		memcpy(k->cap, cap->tag, sizeof(k->cap));
	}
	eng_wire_kreq_encode(k);
	eng_wire_kreq_seal(k, &c->s, name, nlen, ctr);
}

int eng_send_req(struct eng_cconn *c, const struct eng_wire_req *req, const struct eng_cap *cap,
		 uint32_t crc, const void *name, size_t nlen, int flags, uint64_t deadline_ns,
		 uint64_t *ctr)
{
	struct eng_wire_kreq k;
	struct iovec v = {(void *)name, nlen};
	struct eng_iovc it;

	req_build(c, req, cap, crc, name, nlen, &k, ctr);
	eng_iovc_init(&it, &v, 1, 0, name ? nlen : 0);
	eng_iovc_head(&it, &k, sizeof(k));
	return eng_io_send(c->fd, &it, flags, deadline_ns);
}

int eng_recv_rep(struct eng_cconn *c, uint64_t ctr, struct eng_wire_rep *rep, uint64_t deadline_ns,
		 int *replied)
{
	struct eng_wire_krep k;
	size_t size = sizeof(k);
	struct iovec v = {&k, size};
	struct eng_iovc it;
	int rc;

	eng_iovc_init(&it, &v, 1, 0, size);
	rc = eng_io_recv(c->fd, &it, deadline_ns);
	*replied = it.left < size;
	if (rc)
		return rc;
	if (c->keyed && eng_wire_krep_open(&k, &c->s, ctr, NULL, 0))
		return -EPROTO; /* not the owner's answer to this request */
	if (!c->keyed)
		eng_wire_rep_decode(&k.h);
	*rep = k.h;
	return 0;
}

/* Receive and check the reply header; *replied tells whether a byte came. */
static int recv_rep(struct eng_cconn *c, uint64_t ctr, uint64_t id, uint64_t len,
		    uint64_t deadline_ns, int *replied)
{
	struct eng_wire_rep rep;
	int rc = eng_recv_rep(c, ctr, &rep, deadline_ns, replied);

	if (rc)
		return rc;
	if (rep.magic != ENG_WIRE_REP_MAGIC || rep.id != id)
		return -EPROTO; /* not an answer to this request: its status says nothing */
	if (rep.status) {
		LC_DEBUG(ENG_LOG, "peer refused request %llu: %d", (unsigned long long)id,
			 rep.status);
		return eng_refusal(rep.status);
	}
	return rep.length == len ? 0 : -EPROTO;
}

/*
 * A WRITE whose sending broke as the owner closed: the owner may have
 * answered its first request before (a refusal of the grant, made from the
 * header alone, then the close while the payload still came). That
 * refusal (-EKEYREJECTED) when it is one, else rc.
 */
static int write_broken(struct eng_cconn *c, uint64_t ctr, uint64_t id, uint64_t len,
			uint64_t deadline_ns, int *replied, int rc)
{
	if (rc != -EPIPE && rc != -ECONNRESET)
		return rc;
	return recv_rep(c, ctr, id, len, deadline_ns, replied) == -EKEYREJECTED ? -EKEYREJECTED
										: rc;
}

/* Compare-and-swaps a slice makes to raise a landed word. */
#define ENG_LANDED_TRIES 8

/* The length of op's slice idx. */
static uint64_t slice_len(const struct eng_op *op, unsigned idx)
{
	return idx == op->priv.nslices - 1u ? op->priv.total - idx * op->priv.chunk
					    : op->priv.chunk;
}

/*
 * The first moved bytes of READ slice s landed: raise the op's landed word
 * to the transfer's landed prefix, the slices before the first one still
 * landing and that one's bytes. Slices land on threads of their own, so a
 * word another slice raised further stays.
 */
static void slice_landed(void *arg, uint64_t moved)
{
	const struct tcp_slice *s = arg;
	struct eng_op *op = s->op;
	uint64_t prefix = 0, word;

	lc_store_release(&op->priv.slice_landed[s->idx], moved);
	/* Pairs with the same fence in the other slices' calls: of two slices
	 * storing their last counts at once, at least one sees the other's. */
	lc_smp_mb();
	for (unsigned i = 0; i < op->priv.nslices; i++) {
		uint64_t got = lc_load_acquire(&op->priv.slice_landed[i]);

		prefix += got;
		if (got < slice_len(op, i))
			break;
	}
	/* The word may be in memory a client writes too: a bounded number of
	 * tries, so that one flipping it cannot hold this thread. */
	word = lc_load_acquire(op->landed);
	for (int tries = 0; tries < ENG_LANDED_TRIES && word < op->landed_base + prefix; tries++)
		if (lc_cas(op->landed, &word, op->landed_base + prefix))
			break;
}

/* Move the payload of s on c: fused with its CRC32C when asked. */
static int slice_payload(struct tcp_slice *s, struct eng_cconn *c, struct eng_iovc *data)
{
	uint64_t deadline = s->op->priv.deadline_ns;

	if (!s->fuse_crc)
		return s->op->dir == ENG_WRITE ? eng_io_send(c->fd, data, 0, deadline)
					       : eng_io_recv(c->fd, data, deadline);
	s->ocrc = 0;
	if (s->op->dir == ENG_WRITE)
		return eng_io_send_crc(c->fd, data, &s->ocrc, deadline);
	return eng_io_recv_crc(c->fd, data, &s->ocrc, deadline, s->op->landed ? slice_landed : NULL,
			       s);
}

/* The length of frame i of a framed WRITE of s. */
static uint64_t frame_len(const struct tcp_slice *s, uint64_t i)
{
	uint64_t done = i * ENG_WRITE_FRAME;

	return s->len - done < ENG_WRITE_FRAME ? s->len - done : ENG_WRITE_FRAME;
}

/*
 * The sending of frames broke (rc) after sent of them went out: the owner
 * answers frames in order and closes at a refusal, which may be of any of
 * them (a fence between two). That refusal (-EKEYREJECTED) when the
 * replies hold one, else rc.
 */
static int frames_broken(const struct tcp_slice *s, struct eng_cconn *c, uint64_t ctr0, uint64_t id,
			 uint64_t sent, int *replied, int rc)
{
	if (rc != -EPIPE && rc != -ECONNRESET)
		return rc;
	for (uint64_t i = 0; i < sent; i++) {
		int got = recv_rep(c, ctr0 + i, id + i, frame_len(s, i), s->op->priv.deadline_ns,
				   replied);

		if (got)
			return got == -EKEYREJECTED ? got : rc;
	}
	return rc;
}

/*
 * A keyed WRITE of s whose CRC32C is ours to compute, in frames of at most
 * ENG_WRITE_FRAME bytes: each a request naming its own bytes' CRC32C, sent
 * back to back, so each frame's checksum runs while the one before it
 * crosses (one frame for the slice would hold every byte back until its
 * checksum was done). Then their replies, in order. Sets s->crc, the
 * slice's CRC32C. 0 leaves the connection idle again.
 */
static int write_frames(struct tcp_slice *s, struct eng_cconn *c, int *replied)
{
	const struct eng_op *op = s->op;
	uint64_t deadline = op->priv.deadline_ns, ctr0 = 0, ctr;
	uint64_t nf = (s->len + ENG_WRITE_FRAME - 1) / ENG_WRITE_FRAME;
	uint64_t id = atomic_fetch_add(&s->e->next_id, nf);
	int rc;

	*replied = 0;
	for (uint64_t i = 0, done = 0; i < nf; i++, done += ENG_WRITE_FRAME) {
		uint64_t n = frame_len(s, i);
		uint32_t crc = eng_iov_crc(op->iov, op->iovcnt, s->skip + done, n);
		struct eng_wire_req req = {
		    .magic = ENG_WIRE_REQ_MAGIC,
		    .op = ENG_OP_WRITE,
		    .offset = op->off + s->skip + done,
		    .length = n,
		    .id = id + i,
		};
		struct eng_wire_kreq k;
		struct eng_iovc data;

		req_build(c, &req, op->cap, crc, NULL, 0, &k, &ctr);
		if (!i)
			ctr0 = ctr; /* one sender on c: the counters follow */
		eng_iovc_init(&data, op->iov, op->iovcnt, s->skip + done, n);
		eng_iovc_head(&data, &k, sizeof(k));
		rc = eng_io_send(c->fd, &data, 0, deadline);
		if (rc)
			return frames_broken(s, c, ctr0, id, i + 1, replied, rc);
		s->crc = i ? lc_crc32c_combine(s->crc, crc, n) : crc;
	}
	for (uint64_t i = 0; i < nf; i++) {
		rc = recv_rep(c, ctr0 + i, id + i, frame_len(s, i), deadline, replied);
		if (rc)
			return rc;
	}
	return 0;
}

/* One request and its reply on c; 0 leaves the connection idle again. */
static int slice_on(struct tcp_slice *s, struct eng_cconn *c, int *replied)
{
	const struct eng_op *op = s->op;
	struct eng_wire_req req = {
	    .magic = ENG_WIRE_REQ_MAGIC,
	    .op = op->dir == ENG_WRITE ? ENG_OP_WRITE : ENG_OP_READ,
	    .offset = op->off + s->skip,
	    .length = s->len,
	    .id = atomic_fetch_add(&s->e->next_id, 1),
	};
	uint64_t deadline = op->priv.deadline_ns;
	struct eng_wire_kreq k;
	struct eng_iovc data;
	uint64_t ctr;
	int rc;

	if (s->framed)
		return write_frames(s, c, replied);
	*replied = 0;
	eng_iovc_init(&data, op->iov, op->iovcnt, s->skip, s->len);
	/* A WRITE's header goes out with its payload's first bytes, in one
	 * sendmsg; a READ's alone. */
	if (op->dir == ENG_WRITE) {
		req_build(c, &req, op->cap, s->crc, NULL, 0, &k, &ctr);
		eng_iovc_head(&data, &k, sizeof(k));
		rc = slice_payload(s, c, &data);
		if (rc)
			return write_broken(c, ctr, req.id, s->len, deadline, replied, rc);
	} else {
		rc = eng_send_req(c, &req, op->cap, s->crc, NULL, 0, 0, deadline, &ctr);
	}
	if (!rc)
		rc = recv_rep(c, ctr, req.id, s->len, deadline, replied);
	if (!rc && op->dir != ENG_WRITE)
		rc = slice_payload(s, c, &data);
	return rc;
}

static int slice_conn(void *arg, struct eng_cconn *c, int *replied)
{
	struct tcp_slice *s = arg;
	int rc;

	if (s->live)
		eng_exec_live(s->e, s->live, c->fd);
	rc = slice_on(s, c, replied);
	if (s->live)
		eng_exec_live(s->e, s->live, -1);
	return rc;
}

/* A connection for one exchange: pooled, or new (and past the handshake
 * on a keyed engine); 0 and *out, or -errno. */
int eng_conn_take(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, int *pooled,
		  struct eng_cconn **out, int *live)
{
	int rc;

	*out = NULL;
	rc = eng_pool_take(e, endpoint, deadline_ns, pooled, out, live);

	if (rc || *pooled || !e->keyed)
		return rc;
	if (live)
		eng_exec_live(e, live, (*out)->fd);
	rc = eng_hs_client(e, (*out)->fd, &(*out)->s, deadline_ns);
	if (live)
		eng_exec_live(e, live, -1);
	if (rc) {
		eng_cconn_close(*out);
		*out = NULL;
		return rc;
	}
	(*out)->keyed = 1;
	return 0;
}

int eng_tcp_run(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, eng_conn_fn fn,
		void *arg, int *ran, int *live)
{
	struct eng_pool *p = &e->pool;
	struct eng_cconn *c;
	int pooled, replied, rc;

	if (ran)
		*ran = 0;
	for (int retried = 0;; retried = 1) {
		rc = eng_conn_take(e, endpoint, deadline_ns, &pooled, &c, live);
		if (rc)
			break;
		if (ran)
			*ran = 1;
		rc = fn(arg, c, &replied);
		if (!rc) {
			eng_pool_give(p, endpoint, c);
			return 0;
		}
		eng_cconn_close(c);
		/*
		 * A pooled connection to a peer that restarted fails before any
		 * reply byte. Its idle siblings are as dead: drop them, and try
		 * once more on a new connection. Re-sending is safe, a READ or a
		 * WRITE of the same bytes twice has the effect of one.
		 */
		if (!pooled || replied || rc == -ETIMEDOUT || retried)
			break;
		LC_DEBUG(ENG_LOG, "stale connection to %s (%s), retrying", endpoint, strerror(-rc));
		eng_pool_flush(p, endpoint);
	}
	return rc;
}

unsigned eng_tcp_slices(const struct eng_engine *e, uint64_t total)
{
	uint64_t n = (total + ENG_SLICE_MIN - 1) / ENG_SLICE_MIN;

	return n > e->cfg.slices ? e->cfg.slices : n ? (unsigned)n : 1;
}

int eng_tcp_plan(struct eng_engine *e, struct eng_op *op)
{
	if (e->keyed && !op->cap) {
		LC_DEBUG(ENG_LOG, "no capability for a transfer with %s", op->endpoint);
		return ENG_XFER_UNSENT; /* the owner would refuse it: nothing sent */
	}
	op->priv.nslices = (uint8_t)eng_tcp_slices(e, op->priv.total);
	op->priv.chunk = (op->priv.total + op->priv.nslices - 1) / op->priv.nslices;
	return 0;
}

int eng_tcp_slice(struct eng_engine *e, struct eng_op *op, unsigned idx, int *ran, int *live)
{
	uint64_t skip = (uint64_t)idx * op->priv.chunk;
	struct tcp_slice s = {
	    .e = e,
	    .op = op,
	    .idx = idx,
	    .skip = skip,
	    .len = slice_len(op, idx),
	    .live = live,
	};
	int keyed_write = e->keyed && op->dir == ENG_WRITE, rc;

	/* A keyed WRITE names its payload's CRC32C in the header: the
	 * caller's for a whole transfer, else each frame's own. */
	if (keyed_write && op->crc_known && op->priv.nslices == 1)
		s.crc = op->known_crc;
	else
		s.framed = keyed_write;
	s.fuse_crc = op->want_crc && !keyed_write;
	rc = eng_tcp_run(e, op->endpoint, op->priv.deadline_ns, slice_conn, &s, ran, live);
	if (rc) {
		LC_DEBUG(ENG_LOG, "transfer of %llu bytes with %s failed: %s",
			 (unsigned long long)s.len, op->endpoint, strerror(-rc));
		return rc;
	}
	if (op->want_crc)
		op->priv.slice_crc[idx] = keyed_write ? s.crc : s.ocrc;
	return 0;
}

uint32_t eng_tcp_crc(const struct eng_op *op)
{
	uint32_t crc = op->priv.slice_crc[0];

	if (op->priv.has_scrc)
		return op->priv.scrc;
	/* Each slice checksummed its own bytes beside its socket: no second
	 * pass over the transfer, only a shift per slice. */
	for (unsigned i = 1; i < op->priv.nslices; i++)
		crc = lc_crc32c_combine(crc, op->priv.slice_crc[i], slice_len(op, i));
	return crc;
}

/* The synchronous table entry: the slices one after the other, here. */
static int tcp_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		    const struct iovec *iov, int iovcnt, uint64_t total, const struct eng_cap *cap,
		    uint32_t *crc, uint64_t deadline_ns, int *live)
{
	struct eng_op op = eng_op_of(endpoint, dir, off, iov, iovcnt, cap, crc);
	int rc, ran = 0, anyran = 0;

	op.priv.total = total;
	op.priv.deadline_ns = deadline_ns;
	rc = eng_tcp_plan(e, &op);
	if (rc)
		return rc;
	for (unsigned i = 0; i < op.priv.nslices; i++) {
		rc = eng_tcp_slice(e, &op, i, &ran, live);
		anyran |= ran;
		if (rc)
			return eng_xfer_failed(rc, anyran);
	}
	if (crc)
		*crc = eng_tcp_crc(&op);
	return 0;
}

const struct eng_transport_ops eng_tcp_ops = {
    .xfer = tcp_xfer,
};
