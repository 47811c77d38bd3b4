/*
 * tcp.c - the TCP transport: one request/reply per pooled connection (wire
 * format in eng_int.h), the caller's iovecs handed straight to the socket.
 * A transfer above ENG_SLICE_MIN is cut into a few slices that run on
 * connections of their own in parallel.
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
	int rc;
	int ran;      /* a connection was made: bytes may have gone out */
	int threaded; /* runs on tid, else on the caller */
	pthread_t tid;
};

static int send_req(int fd, struct eng_wire_req *req, uint64_t deadline_ns)
{
	struct iovec v = {req, sizeof(*req)};
	struct eng_iovc c;
	/* The payload follows at once: let the header share its first segment. */
	int flags = req->op == ENG_OP_WRITE ? MSG_MORE : 0;

	eng_wire_req_encode(req);
	eng_iovc_init(&c, &v, 1, 0, sizeof(*req));
	return eng_io_send(fd, &c, flags, deadline_ns);
}

/* Receive and check the reply header; *replied tells whether a byte came. */
static int recv_rep(int fd, uint64_t id, uint64_t len, uint64_t deadline_ns, int *replied)
{
	struct eng_wire_rep rep;
	struct iovec v = {&rep, sizeof(rep)};
	struct eng_iovc c;
	int rc;

	eng_iovc_init(&c, &v, 1, 0, sizeof(rep));
	rc = eng_io_recv(fd, &c, deadline_ns);
	*replied = c.left < sizeof(rep);
	if (rc)
		return rc;
	eng_wire_rep_decode(&rep);
	if (rep.magic != ENG_WIRE_REP_MAGIC || rep.id != id || rep.length != len)
		return -EPROTO;
	if (rep.status) {
		LC_DEBUG(ENG_LOG, "peer refused request %llu: %d", (unsigned long long)id,
			 rep.status);
		return -EPROTO;
	}
	return 0;
}

/* One request and its reply on fd; 0 leaves the connection idle again. */
static int slice_on(const struct tcp_slice *s, int fd, int *replied)
{
	uint64_t id = atomic_fetch_add(&s->e->next_id, 1);
	struct eng_wire_req req = {
	    .magic = ENG_WIRE_REQ_MAGIC,
	    .version = ENG_WIRE_VERSION,
	    .op = s->dir == ENG_WRITE ? ENG_OP_WRITE : ENG_OP_READ,
	    .offset = s->off + s->skip,
	    .length = s->len,
	    .id = id,
	};
	struct eng_iovc data;
	int rc;

	*replied = 0;
	eng_iovc_init(&data, s->iov, s->iovcnt, s->skip, s->len);
	rc = send_req(fd, &req, s->deadline_ns);
	if (!rc && s->dir == ENG_WRITE)
		rc = eng_io_send(fd, &data, 0, s->deadline_ns);
	if (!rc)
		rc = recv_rep(fd, id, s->len, s->deadline_ns, replied);
	if (!rc && s->dir != ENG_WRITE)
		rc = eng_io_recv(fd, &data, s->deadline_ns);
	return rc;
}

static int slice_conn(void *arg, int fd, int *replied)
{
	return slice_on(arg, fd, replied);
}

static int slice_run(struct tcp_slice *s)
{
	int rc = eng_tcp_run(s->e, s->endpoint, s->deadline_ns, slice_conn, s, &s->ran);

	if (rc)
		LC_DEBUG(ENG_LOG, "transfer of %llu bytes with %s failed: %s",
			 (unsigned long long)s->len, s->endpoint, strerror(-rc));
	return rc;
}

int eng_tcp_run(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, eng_conn_fn fn,
		void *arg, int *ran)
{
	struct eng_pool *p = &e->pool;
	int fd, pooled, replied, rc;

	if (ran)
		*ran = 0;
	for (int retried = 0;; retried = 1) {
		fd = eng_pool_take(p, endpoint, deadline_ns, &pooled);
		if (fd < 0) {
			rc = fd;
			break;
		}
		if (ran)
			*ran = 1;
		rc = fn(arg, fd, &replied);
		if (!rc) {
			eng_pool_give(p, endpoint, fd);
			return 0;
		}
		close(fd);
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

static void *slice_main(void *arg)
{
	struct tcp_slice *s = arg;

	s->rc = slice_run(s);
	return NULL;
}

static int tcp_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		    const struct iovec *iov, int iovcnt, uint64_t total, uint32_t *crc)
{
	struct tcp_slice s[ENG_SLICE_MAX];
	uint64_t n = (total + ENG_SLICE_MIN - 1) / ENG_SLICE_MIN;
	uint64_t chunk, deadline = lc_now_ns() + e->timeout_ns;
	int nslices, unsent = 0, rc = 0;

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
		};
		/* Slice 0 runs on the caller; a slice whose thread cannot start, too. */
		s[i].threaded = i > 0 && !pthread_create(&s[i].tid, NULL, slice_main, &s[i]);
	}
	for (int i = 0; i < nslices; i++) {
		if (s[i].threaded)
			pthread_join(s[i].tid, NULL);
		else
			s[i].rc = slice_run(&s[i]);
		unsent += s[i].rc && !s[i].ran;
		if (s[i].rc)
			rc = LUNAR_ERR_TRANSFER_FAIL;
	}
	if (unsent == nslices)
		return ENG_XFER_UNSENT; /* no slice got a connection */
	/* Sockets cannot checksum on the way: one pass over the local bytes. */
	if (!rc && crc) {
		*crc = 0;
		for (int i = 0; i < iovcnt; i++)
			*crc = lc_crc32c(*crc, iov[i].iov_base, iov[i].iov_len);
	}
	return rc;
}

const struct eng_transport_ops eng_tcp_ops = {
    .xfer = tcp_xfer,
};
