/*
 * tcp.c - the TCP transport: one request/reply per pooled connection (wire
 * format in eng_int.h), the caller's iovecs handed straight to the socket.
 * A transfer above ENG_SLICE_MIN is cut into a few slices that run on
 * connections of their own in parallel. On a keyed engine a new connection
 * first passes the handshake, and each request carries the capability, the
 * payload's CRC32C and a MAC; each reply's MAC is checked.
 */
#include "eng_int.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "crc32c.h"
#include "lunar.h"

#define ENG_SLICE_MIN (4ull << 20) /* bytes; smaller transfers use one connection */
#define ENG_SLICE_MAX 4		   /* slices (connections) of one transfer */

/* One part of a transfer: [skip, skip + len) of the iov at off + skip remotely. */
struct tcp_slice {
	struct eng_engine *e;
	const char *endpoint;
	enum eng_dir dir;
	uint64_t off;
	const struct iovec *iov;
	int iovcnt;
	uint64_t skip;
	uint64_t len;
	uint64_t deadline_ns;
	const struct eng_cap *cap;
	uint32_t crc; /* keyed WRITE: CRC32C of this slice's bytes */
	int rc;
	int ran;      /* a connection was made: bytes may have gone out */
	int threaded; /* runs on tid, else on the caller */
	pthread_t tid;
};

int eng_send_req(struct eng_cconn *c, const struct eng_wire_req *req, const struct eng_cap *cap,
		 uint32_t crc, const void *name, size_t nlen, int flags, uint64_t deadline_ns,
		 uint64_t *ctr)
{
	struct eng_wire_kreq k = {.h = *req, .crc = crc};
	struct iovec v[2] = {{&k, sizeof(k)}, {(void *)name, nlen}};
	struct eng_iovc it;

	*ctr = 0;
	if (!c->keyed) {
		k.h.version = ENG_WIRE_VERSION;
		eng_wire_req_encode(&k.h);
		v[0].iov_len = sizeof(k.h);
	} else {
		k.h.version = ENG_WIRE_VERSION_KEYED;
		if (cap) {
			k.cap_offset = cap->offset;
			k.cap_length = cap->length;
			k.cap_version = cap->version;
			k.cap_expiry_ms = cap->expiry_ms;
			memcpy(k.cap, cap->tag, sizeof(k.cap));
		}
		eng_wire_kreq_encode(&k);
		eng_wire_kreq_seal(&k, &c->s, name, nlen, ctr);
	}
	eng_iovc_init(&it, v, name && nlen ? 2 : 1, 0, v[0].iov_len + (name ? nlen : 0));
	return eng_io_send(c->fd, &it, flags, deadline_ns);
}

int eng_recv_rep(struct eng_cconn *c, uint64_t ctr, struct eng_wire_rep *rep,
		 uint64_t deadline_ns, int *replied)
{
	struct eng_wire_krep k;
	size_t size = c->keyed ? sizeof(k) : sizeof(k.h);
	struct iovec v = {&k, size};
	struct eng_iovc it;
	int rc;

	eng_iovc_init(&it, &v, 1, 0, size);
	rc = eng_io_recv(c->fd, &it, deadline_ns);
	*replied = it.left < size;
	if (rc)
		return rc;
	if (c->keyed && eng_wire_krep_open(&k, &c->s, ctr))
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
	if (rep.status) {
		LC_DEBUG(ENG_LOG, "peer refused request %llu: %d", (unsigned long long)id,
			 rep.status);
		return -EPROTO;
	}
	if (rep.magic != ENG_WIRE_REP_MAGIC || rep.id != id || rep.length != len)
		return -EPROTO;
	return 0;
}

/* One request and its reply on c; 0 leaves the connection idle again. */
static int slice_on(const struct tcp_slice *s, struct eng_cconn *c, int *replied)
{
	struct eng_wire_req req = {
	    .magic = ENG_WIRE_REQ_MAGIC,
	    .op = s->dir == ENG_WRITE ? ENG_OP_WRITE : ENG_OP_READ,
	    .offset = s->off + s->skip,
	    .length = s->len,
	    .id = atomic_fetch_add(&s->e->next_id, 1),
	};
	/* The payload follows at once: let the header share its first segment. */
	int flags = s->dir == ENG_WRITE ? MSG_MORE : 0;
	struct eng_iovc data;
	uint64_t ctr;
	int rc;

	*replied = 0;
	eng_iovc_init(&data, s->iov, s->iovcnt, s->skip, s->len);
	rc = eng_send_req(c, &req, s->cap, s->crc, NULL, 0, flags, s->deadline_ns, &ctr);
	if (!rc && s->dir == ENG_WRITE)
		rc = eng_io_send(c->fd, &data, 0, s->deadline_ns);
	if (!rc)
		rc = recv_rep(c, ctr, req.id, s->len, s->deadline_ns, replied);
	if (!rc && s->dir != ENG_WRITE)
		rc = eng_io_recv(c->fd, &data, s->deadline_ns);
	return rc;
}

static int slice_conn(void *arg, struct eng_cconn *c, int *replied)
{
	return slice_on(arg, c, replied);
}

static int slice_run(struct tcp_slice *s)
{
	int rc = eng_tcp_run(s->e, s->endpoint, s->deadline_ns, slice_conn, s, &s->ran);

	if (rc)
		LC_DEBUG(ENG_LOG, "transfer of %llu bytes with %s failed: %s",
			 (unsigned long long)s->len, s->endpoint, strerror(-rc));
	return rc;
}

/* A connection for one exchange: pooled, or new (and past the handshake
 * on a keyed engine); 0 and *out, or -errno. */
static int take_conn(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns,
		     int *pooled, struct eng_cconn **out)
{
	int rc = eng_pool_take(&e->pool, endpoint, deadline_ns, pooled, out);

	if (rc || *pooled || !e->keyed)
		return rc;
	rc = eng_hs_client(e, (*out)->fd, &(*out)->s, deadline_ns);
	if (rc) {
		eng_cconn_close(*out);
		return rc;
	}
	(*out)->keyed = 1;
	return 0;
}

int eng_tcp_run(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, eng_conn_fn fn,
		void *arg, int *ran)
{
	struct eng_pool *p = &e->pool;
	struct eng_cconn *c;
	int pooled, replied, rc;

	if (ran)
		*ran = 0;
	for (int retried = 0;; retried = 1) {
		rc = take_conn(e, endpoint, deadline_ns, &pooled, &c);
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

/* CRC32C of bytes [skip, skip + len) of iov. */
static uint32_t iov_crc(const struct iovec *iov, int iovcnt, uint64_t skip, uint64_t len)
{
	uint32_t crc = 0;

	for (int i = 0; i < iovcnt && len; i++) {
		size_t n = iov[i].iov_len;

		if (skip >= n) {
			skip -= n;
			continue;
		}
		n -= (size_t)skip;
		n = n < len ? n : (size_t)len;
		crc = lc_crc32c(crc, (const char *)iov[i].iov_base + skip, n);
		skip = 0;
		len -= n;
	}
	return crc;
}

static void *slice_main(void *arg)
{
	struct tcp_slice *s = arg;

	if (s->e->keyed && s->dir == ENG_WRITE)
		s->crc = iov_crc(s->iov, s->iovcnt, s->skip, s->len);
	s->rc = slice_run(s);
	return NULL;
}

static int tcp_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		    const struct iovec *iov, int iovcnt, uint64_t total, const struct eng_cap *cap,
		    uint32_t *crc)
{
	struct tcp_slice s[ENG_SLICE_MAX];
	uint64_t n = (total + ENG_SLICE_MIN - 1) / ENG_SLICE_MIN;
	uint64_t chunk, deadline = lc_now_ns() + e->timeout_ns;
	int nslices, unsent = 0, rc = 0;

	if (e->keyed && !cap) {
		LC_DEBUG(ENG_LOG, "no capability for a transfer with %s", endpoint);
		return ENG_XFER_UNSENT; /* the owner would refuse it: nothing sent */
	}
	nslices = n > ENG_SLICE_MAX ? ENG_SLICE_MAX : (int)n;
	chunk = (total + (uint64_t)nslices - 1) / (uint64_t)nslices;
	for (int i = 0; i < nslices; i++) {
		s[i] = (struct tcp_slice){
		    .e = e,
		    .endpoint = endpoint,
		    .dir = dir,
		    .off = off,
		    .iov = iov,
		    .iovcnt = iovcnt,
		    .skip = (uint64_t)i * chunk,
		    .len = i == nslices - 1 ? total - (uint64_t)i * chunk : chunk,
		    .deadline_ns = deadline,
		    .cap = cap,
		};
		/* Slice 0 runs on the caller; a slice whose thread cannot start, too. */
		s[i].threaded = i > 0 && !pthread_create(&s[i].tid, NULL, slice_main, &s[i]);
	}
	for (int i = 0; i < nslices; i++) {
		if (s[i].threaded)
			pthread_join(s[i].tid, NULL);
		else
			slice_main(&s[i]);
		unsent += s[i].rc && !s[i].ran;
		if (s[i].rc)
			rc = LUNAR_ERR_TRANSFER_FAIL;
	}
	if (unsent == nslices)
		return ENG_XFER_UNSENT; /* no slice got a connection */
	/* A keyed write of one slice checksummed its bytes already. */
	if (!rc && crc && nslices == 1 && e->keyed && dir == ENG_WRITE) {
		*crc = s[0].crc;
	} else if (!rc && crc) {
		/* Sockets cannot checksum on the way: one pass over the local bytes. */
		*crc = 0;
		for (int i = 0; i < iovcnt; i++)
			*crc = lc_crc32c(*crc, iov[i].iov_base, iov[i].iov_len);
	}
	return rc;
}

const struct eng_transport_ops eng_tcp_ops = {
    .xfer = tcp_xfer,
};
