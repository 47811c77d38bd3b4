/*
 * server.c - the data port: a listener thread accepts connections and starts
 * a thread per connection, which serves READ/WRITE requests (eng_int.h wire
 * format) on this engine's segment until EOF, an error or a refusal. Every
 * range is checked against the segment before a byte moves; payloads go
 * straight between the socket and the segment. When every connection slot
 * is taken, the connection longest in its handshake (keyed: a peer not yet
 * known), else the one that has waited longest for a request, gives way
 * to the new one, so idle sockets of one peer cannot lock the others out;
 * and one address holds at most a quarter of the slots, so neither can
 * sockets that each began a request and stalled (held to the I/O timeout).
 * A connection thread that ends tells the listener (an eventfd), which
 * joins it and closes its descriptor then. A keyed engine's connection
 * starts with the handshake, and each request must carry a good MAC, the
 * next counter and a capability for its range before a byte of the segment
 * moves (eng_int.h). An RDMA connect request (rdma_srv.c) keeps its
 * connection as the lifeline of the queue pairs it set up.
 */
#include "eng_int.h"
#include "rdma_int.h"

#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <sodium.h>

#include "atomic.h"
#include "clock.h"
#include "crc32c.h"
#include "failpoint.h"
#include "log.h"
#include "lunar.h"

#define ENG_SRV_BACKLOG	     128
#define ENG_SRV_MAX_CONNS    1024 /* a peer opening sockets forever must not exhaust threads */
#define ENG_SRV_MAX_PER_ADDR (ENG_SRV_MAX_CONNS / 4) /* far above a peer's pool and slices */
#define ENG_SRV_EVICTED	     UINT64_MAX /* idle_since of a connection the listener took back */

struct eng_srv_conn {
	struct eng_srv_conn *next;
	struct eng_engine *e;
	int fd; /* closed only after the thread is joined: never reused under a shutdown() */
	uint8_t addr[16]; /* the peer's address, IPv4 as ::ffff:a.b.c.d */
	pthread_t tid;
	atomic_int done;
	uint64_t gen; /* the server's fence count when it was accepted */
	/* When it began to wait for a request (or, keyed, for the handshake);
	 * 0 while it serves one. A CAS decides between the request's first
	 * byte and an eviction. */
	_Atomic uint64_t idle_since;
	atomic_int greeting;   /* in the handshake: a peer not yet known, evicted first */
	struct auth_session s; /* keyed engines: from the handshake */
};

/* Encode the reply to q into *rep, all of which goes (a keyless reply
 * leaves the fields after rep->h zero). */
static void rep_build(const struct eng_srv_req *q, int32_t status, uint64_t length,
		      struct eng_wire_krep *rep)
{
	*rep = (struct eng_wire_krep){
	    .h = {.magic = ENG_WIRE_REP_MAGIC, .status = status, .id = q->id, .length = length},
	};
	if (!q->s) {
		eng_wire_rep_encode(&rep->h);
		return;
	}
	eng_wire_krep_encode(rep);
	eng_wire_krep_seal(rep, q->s, q->ctr, NULL, 0);
}

int eng_send_rep(const struct eng_srv_req *q, int32_t status, uint64_t length, int flags,
		 uint64_t deadline_ns)
{
	struct eng_wire_krep rep;
	struct eng_iovc c;

	rep_build(q, status, length, &rep);
	eng_iovc_init(&c, NULL, 0, 0, 0);
	eng_iovc_head(&c, &rep, sizeof(rep));
	return eng_io_send(q->fd, &c, flags, deadline_ns);
}

/* Move the checked range of req between the socket and the segment, then
 * reply; a keyed WRITE's payload must have the CRC32C *crc. */
static int serve_range(struct eng_engine *e, const struct eng_srv_req *q,
		       const struct eng_wire_req *req, const uint32_t *crc, uint64_t deadline)
{
	struct iovec v = {(char *)e->cfg.seg_base + req->offset, (size_t)req->length};
	struct eng_wire_krep rep;
	struct eng_iovc c;
	int rc;

	eng_iovc_init(&c, &v, 1, 0, req->length);
	if (req->op == ENG_OP_WRITE) {
		uint32_t got = 0;

		/* tests: a write held back (sleep), or lost with its connection */
		if (LC_FAILPOINT("engine-serve-write"))
			return -EPROTO;
		/* The CRC32C of each chunk as it lands, while it is in the cache.
		 * The range's bytes are ordered by the master's grants, across
		 * processes: untracked (atomic.h). */
		LC_UNTRACKED_BEGIN();
		rc = crc ? eng_io_recv_crc(q->fd, &c, &got, deadline, NULL, 0)
			 : eng_io_recv(q->fd, &c, deadline);
		LC_UNTRACKED_END();
		if (rc)
			return rc;
		if (crc && got != *crc) {
			eng_reject(e, ENG_REJ_CRC, q->fd, "WRITE payload unlike its CRC32C");
			eng_send_rep(q, LUNAR_ERR_CHECKSUM_MISMATCH, 0, 0, deadline);
			return -EPROTO;
		}
		return eng_send_rep(q, 0, req->length, 0, deadline);
	}
	/* The reply header and the bytes in one sendmsg (untracked, as above). */
	rep_build(q, 0, req->length, &rep);
	eng_iovc_head(&c, &rep, sizeof(rep));
	LC_UNTRACKED_BEGIN();
	rc = eng_io_send(q->fd, &c, 0, deadline);
	LC_UNTRACKED_END();
	return rc;
}

/* Refuse req with status after a bad header; always < 0 (close). */
static int refuse(const struct eng_srv_req *q, const struct eng_wire_req *req, int status,
		  uint64_t deadline)
{
	LC_DEBUG(ENG_LOG, "refused op %u offset %llu length %llu: %d", req->op,
		 (unsigned long long)req->offset, (unsigned long long)req->length, status);
	eng_send_rep(q, status, req->length, 0, deadline);
	return -EPROTO;
}

/* Wait as long as it takes for a request's first bytes, and take up to
 * len of them at once: how many (>= 1), or -errno (-ECONNRESET: EOF).
 * Busy-polls for them first (once), then sleeps. */
static ssize_t recv_first(int fd, void *buf, size_t len)
{
	int polled = 0;

	for (;;) {
		ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
		int rc;

		if (n > 0)
			return n;
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (!polled) {
			polled = 1;
			if (eng_io_poll(fd, POLLIN, ENG_NO_DEADLINE))
				continue;
		}
		rc = eng_io_wait(fd, POLLIN, ENG_NO_DEADLINE);
		if (rc)
			return rc;
	}
}

/* Serve a keyed request whose header k (as received) came in full. */
static int serve_keyed(struct eng_srv_conn *conn, struct eng_wire_kreq *k, uint64_t deadline)
{
	struct eng_engine *e = conn->e;
	struct eng_srv_req q = {.fd = conn->fd, .s = &conn->s, .idle = &conn->idle_since};
	char name[ENG_DISK_NAME_MAX + 1];
	uint64_t nlen = 0;
	int rc, disk = le16toh(k->h.op) == ENG_OP_READ_DISK;
	int rdma = le16toh(k->h.op) == ENG_OP_RDMA_CONNECT;

	/* A READ_DISK's name and an RDMA connect's body are under the MAC:
	 * take them first, bounded. */
	if (rdma) {
		nlen = ENG_RDMA_HS_SIZE;
		rc = eng_io_recv_buf(conn->fd, name, nlen, deadline);
		if (rc)
			return rc;
	} else if (disk) {
		nlen = le64toh(k->h.offset);
		if (nlen < 3 || nlen > ENG_DISK_NAME_MAX) {
			eng_reject(e, ENG_REJ_MAC, conn->fd, "READ_DISK name length");
			return -EACCES;
		}
		rc = eng_io_recv_buf(conn->fd, name, nlen, deadline);
		if (rc)
			return rc;
	}
	rc = eng_wire_kreq_open(k, &conn->s, disk || rdma ? name : NULL, nlen);
	if (rc) {
		eng_reject(e, rc, conn->fd, rc == ENG_REJ_MAC ? "bad MAC" : "counter seen before");
		return -EACCES;
	}
	q.ctr = k->ctr;
	q.id = k->h.id;
	if (rdma)
		return eng_rdma_serve(e, &q, k, (const unsigned char *)name, deadline);
	if (disk)
		rc = k->h.magic != ENG_WIRE_REQ_MAGIC || k->h.version != ENG_WIRE_VERSION_KEYED
			 ? LUNAR_ERR_PROTOCOL
			 : 0;
	else
		rc = eng_wire_req_check(&k->h, e->cfg.seg_size, ENG_WIRE_VERSION_KEYED,
					ENG_OPS_DATA);
	if (rc)
		return refuse(&q, &k->h, rc, deadline);
	if (eng_secret_check(e, k, disk ? name : NULL, nlen)) {
		eng_reject(e, ENG_REJ_CAPABILITY, conn->fd, "no capability for the range");
		eng_send_rep(&q, LUNAR_ERR_UNAUTHORIZED, 0, 0, deadline);
		return -EACCES;
	}
	if (disk)
		return eng_disk_serve(e, &q, &k->h, name, deadline);
	return serve_range(e, &q, &k->h, k->h.op == ENG_OP_WRITE ? &k->crc : NULL, deadline);
}

/* The connection whose idle time w is begins to wait for work at now: 0,
 * or -ECONNABORTED when the listener took its slot back already (its
 * mark is never overwritten: one eviction frees one slot). */
static int idle_begin(_Atomic uint64_t *w, uint64_t now)
{
	uint64_t was = atomic_load(w);

	do {
		if (was == ENG_SRV_EVICTED)
			return -ECONNABORTED;
	} while (!atomic_compare_exchange_weak(w, &was, now));
	return 0;
}

/* Serve one request; 0 to go on with the next, or < 0 to close. */
static int serve_one(struct eng_srv_conn *conn)
{
	struct eng_engine *e = conn->e;
	struct eng_wire_kreq k;
	struct eng_srv_req q = {.fd = conn->fd, .idle = &conn->idle_since};
	size_t size = sizeof(k);
	uint64_t deadline, idle = lc_now_ns();
	ssize_t got;
	int status, rc;

	/* An idle pooled connection may sit here for as long as its client
	 * likes, or until a new connection needs its slot. Once a request's
	 * first byte came, the rest must follow within the timeout: else a peer
	 * could hold a connection slot, and its thread, with a byte apiece. */
	if (idle_begin(&conn->idle_since, idle))
		return -ECONNABORTED;
	atomic_store(&conn->greeting, 0); /* past the handshake, idle from now */
	/* A reader's next read often follows its last at once (the blocks of
	 * a prefix, one after the other), and a writer's next write follows
	 * its commit to the master: polled for, as a sleeping thread's wakeup
	 * is what a small transfer mostly waits for on a virtual machine (a
	 * 4 KiB put's p50 halved, 64 KiB's fell by a quarter, larger ones
	 * unchanged, where the master shares this node's CPU). Usually the
	 * whole header: one syscall. */
	got = recv_first(conn->fd, &k, size);
	if (got < 0)
		return (int)got;
	if (!atomic_compare_exchange_strong(&conn->idle_since, &idle, 0))
		return -ECONNABORTED; /* evicted as the request came */
	deadline = lc_now_ns() + e->timeout_ns;
	rc = eng_io_recv_buf(conn->fd, (char *)&k + got, size - (size_t)got, deadline);
	if (rc)
		return rc;
	if (e->keyed)
		return serve_keyed(conn, &k, deadline);
	eng_wire_req_decode(&k.h);
	q.id = k.h.id;
	if (k.h.magic == ENG_WIRE_REQ_MAGIC && k.h.version == ENG_WIRE_VERSION) {
		if (k.h.op == ENG_OP_READ_DISK)
			return eng_disk_serve(e, &q, &k.h, NULL, deadline);
		/* A range of another mount: its grant predates our last fence.
		 * Refused as a keyed grant is, with no length, so an RDMA
		 * connect's client reads no body either. */
		if (le64toh(k.mount) != atomic_load(&e->mount)) {
			LC_DEBUG(ENG_LOG, "refused op %u: a range of another mount", k.h.op);
			eng_send_rep(&q, LUNAR_ERR_UNAUTHORIZED, 0, 0, deadline);
			return -EACCES;
		}
	}
	if (k.h.magic == ENG_WIRE_REQ_MAGIC && k.h.op == ENG_OP_RDMA_CONNECT)
		return eng_rdma_serve(e, &q, &k, NULL, deadline);
	status = eng_wire_req_check(&k.h, e->cfg.seg_size, ENG_WIRE_VERSION, ENG_OPS_DATA);
	if (status)
		return refuse(&q, &k.h, status, deadline);
	return serve_range(e, &q, &k.h, NULL, deadline);
}

int eng_srv_wait(const struct eng_srv_req *q)
{
	struct pollfd p = {.fd = q->fd, .events = POLLIN};
	uint64_t idle = lc_now_ns();

	if (q->idle && idle_begin(q->idle, idle))
		return -ECONNABORTED;
	while (poll(&p, 1, -1) < 0)
		if (errno != EINTR)
			return -errno;
	if (q->idle && !atomic_compare_exchange_strong(q->idle, &idle, 0))
		return -ECONNABORTED; /* taken back as the input came */
	return 0;
}

/* Whether we cut c short ourselves: the server stopping, a fence since it
 * was accepted, or the listener taking it back. */
static int conn_cut(struct eng_srv_conn *c)
{
	struct eng_server *s = &c->e->srv;
	int fenced;

	pthread_mutex_lock(&s->lock);
	fenced = s->gen != c->gen;
	pthread_mutex_unlock(&s->lock);
	return fenced || atomic_load(&s->stopping) ||
	       atomic_load(&c->idle_since) == ENG_SRV_EVICTED;
}

/* The keyed handshake on c: 0, or < 0, a refusal counted unless the
 * connection failed because we cut it short. */
static int conn_handshake(struct eng_srv_conn *c)
{
	const char *why;
	int rc = eng_hs_server(c->e, c->fd, &c->s, lc_now_ns() + c->e->timeout_ns, &why);

	if (rc && (rc == -EACCES || !conn_cut(c)))
		eng_reject(c->e, ENG_REJ_HANDSHAKE, c->fd, why);
	return rc;
}

static void *conn_main(void *arg)
{
	struct eng_srv_conn *c = arg;
	struct eng_server *s = &c->e->srv;
	uint64_t one = 1;

	if (!c->e->keyed || !conn_handshake(c))
		while (!serve_one(c))
			;
	/* Nothing left to take back: no eviction picks it while it ends. */
	atomic_store(&c->idle_since, ENG_SRV_EVICTED);
	sodium_memzero(&c->s, sizeof(c->s));
	/* The peer sees EOF now; the fd itself stays open until the thread is
	 * joined, which the listener does when told, not at its next accept. */
	shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_lock(&s->lock);
	atomic_store(&c->done, 1);
	pthread_cond_broadcast(&s->gone);
	pthread_mutex_unlock(&s->lock);
	(void)!write(s->done_fd, &one, sizeof(one));
	return NULL;
}

/* The peer address of an accepted socket, as 16 bytes (IPv4 mapped). */
static void peer_addr(const struct sockaddr_storage *ss, uint8_t out[16])
{
	memset(out, 0, 16);
	if (ss->ss_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
	} else if (ss->ss_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	}
}

/* Live connections from addr. Listener, under s->lock. */
static unsigned conns_from(const struct eng_server *s, const uint8_t addr[16])
{
	unsigned n = 0;

	for (const struct eng_srv_conn *c = s->conns; c; c = c->next)
		n += !atomic_load(&c->done) && !memcmp(c->addr, addr, 16);
	return n;
}

/* The connection evict_idlest should take: of addr when not NULL; NULL
 * when none waits. *since: its idle time. Under s->lock. */
static struct eng_srv_conn *idlest(struct eng_server *s, const uint8_t *addr, uint64_t *since)
{
	struct eng_srv_conn *old = NULL;
	uint64_t t;
	int greeting = 0;

	*since = ENG_SRV_EVICTED;
	for (struct eng_srv_conn *c = s->conns; c; c = c->next) {
		int g = atomic_load(&c->greeting);

		if ((addr && memcmp(c->addr, addr, 16)) || g < greeting)
			continue;
		t = atomic_load(&c->idle_since);
		if (t && t != ENG_SRV_EVICTED && (g > greeting || t < *since)) {
			*since = t;
			old = c;
			greeting = g;
		}
	}
	return old;
}

/* Make room: shut down the connection (of addr only, when addr is not
 * NULL) still in its handshake longest, else the one that has waited
 * longest for a request: a peer that cannot prove the key gives way before
 * any that did. 0, or -1 when every such connection is serving a request.
 * Listener, under s->lock. */
static int evict_idlest(struct eng_server *s, const uint8_t *addr)
{
	struct eng_srv_conn *old = NULL;
	uint64_t oldest = ENG_SRV_EVICTED;
	static uint64_t warned_ns;

	/* A connection whose request came (or whose wait began anew) as it
	 * was picked loses the race: look again, a few times. */
	for (int tries = 0; !old && tries < 4; tries++) {
		old = idlest(s, addr, &oldest);
		if (!old)
			return -1;
		if (!atomic_compare_exchange_strong(&old->idle_since, &oldest, ENG_SRV_EVICTED))
			old = NULL;
	}
	if (!old)
		return -1;
	atomic_fetch_add_explicit(&s->evicted[atomic_load(&old->greeting) != 0], 1,
				  memory_order_relaxed);
	shutdown(old->fd, SHUT_RDWR);
	if (lc_now_ns() - warned_ns > 1000000000ull) {
		warned_ns = lc_now_ns();
		LC_WARN(ENG_LOG,
			"%u data connections open%s: closing the one idle longest (%llu ms)",
			addr ? ENG_SRV_MAX_PER_ADDR : ENG_SRV_MAX_CONNS,
			addr ? " from one address" : "",
			(unsigned long long)((warned_ns - oldest) / 1000000));
	}
	return 0;
}

/* Join and free the connections whose threads have finished. Listener,
 * under s->lock. */
static void reap_conns(struct eng_server *s, unsigned *live)
{
	struct eng_srv_conn **pp = &s->conns;

	*live = 0;
	while (*pp) {
		struct eng_srv_conn *c = *pp;

		if (!atomic_load(&c->done)) {
			(*live)++;
			pp = &c->next;
			continue;
		}
		pthread_join(c->tid, NULL);
		close(c->fd);
		*pp = c->next;
		free(c);
	}
}

/* Take a slot for a new connection from addr: 0, or -1 to refuse it.
 * Under s->lock. */
static int make_room(struct eng_server *s, const uint8_t addr[16])
{
	static uint64_t warned_ns;
	const char *busy = NULL;
	unsigned live;

	reap_conns(s, &live);
	if (conns_from(s, addr) >= ENG_SRV_MAX_PER_ADDR) {
		if (evict_idlest(s, addr))
			busy = "of one address";
	} else if (live >= ENG_SRV_MAX_CONNS && evict_idlest(s, NULL)) {
		busy = "of all";
	}
	if (!busy)
		return 0;
	if (lc_now_ns() - warned_ns > 1000000000ull) {
		warned_ns = lc_now_ns();
		LC_WARN(ENG_LOG,
			"every data connection slot %s is serving a request: refusing more", busy);
	}
	return -1;
}

static void start_conn(struct eng_engine *e, int fd, const struct sockaddr_storage *ss)
{
	struct eng_server *s = &e->srv;
	struct eng_srv_conn *c;
	uint8_t addr[16];
	int rc;

	peer_addr(ss, addr);
	pthread_mutex_lock(&s->lock);
	if (make_room(s, addr))
		goto err_close;
	c = calloc(1, sizeof(*c));
	if (!c)
		goto err_close;
	c->e = e;
	c->fd = fd;
	c->gen = s->gen;
	atomic_init(&c->idle_since, lc_now_ns());
	atomic_init(&c->greeting, e->keyed);
	memcpy(c->addr, addr, sizeof(addr));
	eng_sock_nodelay(fd);
	rc = pthread_create(&c->tid, NULL, conn_main, c);
	if (rc) {
		LC_WARN(ENG_LOG, "cannot start a connection thread: %s", strerror(rc));
		goto err_free;
	}
	c->next = s->conns;
	s->conns = c;
	pthread_mutex_unlock(&s->lock);
	return;

err_free:
	free(c);
err_close:
	pthread_mutex_unlock(&s->lock);
	close(fd);
}

static void *listen_main(void *arg)
{
	struct eng_engine *e = arg;
	struct eng_server *s = &e->srv;
	struct pollfd pfd[2] = {{.fd = s->lfd, .events = POLLIN},
				{.fd = s->done_fd, .events = POLLIN}};
	struct sockaddr_storage ss;
	socklen_t sslen;
	unsigned live;
	uint64_t n;
	int fd;

	for (;;) {
		/* shutdown() of lfd wakes the poll too (then accept fails). */
		if (poll(pfd, 2, -1) < 0) {
			if (errno != EINTR)
				poll(NULL, 0, 100); /* ENOMEM: back off */
			continue;
		}
		/* Joined at once, not at the next accept: a finished thread
		 * keeps its descriptor and its stack until then. */
		if (pfd[1].revents && read(s->done_fd, &n, sizeof(n)) == sizeof(n)) {
			pthread_mutex_lock(&s->lock);
			reap_conns(s, &live);
			pthread_mutex_unlock(&s->lock);
		}
		if (!pfd[0].revents && !atomic_load(&s->stopping))
			continue;
		sslen = sizeof(ss);
		fd = accept4(s->lfd, (struct sockaddr *)&ss, &sslen, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (atomic_load(&s->stopping)) {
			if (fd >= 0)
				close(fd);
			return NULL;
		}
		if (fd >= 0) {
			start_conn(e, fd, &ss);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		/* Out of descriptors or memory: back off instead of spinning. */
		LC_WARN(ENG_LOG, "accept on %s: %s", e->endpoint, strerror(errno));
		poll(NULL, 0, 100);
	}
}

/* Bind and listen on the configured host and port; returns the fd or -errno. */
static int listen_on(const struct eng_engine *e, uint16_t *port)
{
	struct sockaddr_storage sa;
	socklen_t len;
	char ep[ENG_ENDPOINT_MAX];
	int fd, one = 1, rc;

	rc = eng_addr_format(ep, sizeof(ep), e->host, e->cfg.port);
	if (!rc)
		rc = eng_addr_resolve(ep, ENG_NO_DEADLINE, &sa, &len);
	if (rc)
		return rc;
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	eng_sock_bufs(fd); /* inherited by every accepted connection */
	/* A restarted proxy must get its data port back despite TIME_WAIT. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, ENG_SRV_BACKLOG) < 0)
		goto err_close;
	len = sizeof(sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		goto err_close;
	*port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
					       : ((struct sockaddr_in *)&sa)->sin_port);
	return fd;

err_close:
	rc = -errno;
	close(fd);
	return rc;
}

int eng_server_start(struct eng_engine *e)
{
	struct eng_server *s = &e->srv;
	uint16_t port;
	int rc;

	atomic_init(&s->stopping, 0);
	s->conns = NULL;
	s->gen = 0;
	rc = lc_cond_init(&s->gone);
	if (rc)
		return -rc;
	pthread_mutex_init(&s->lock, NULL); /* no attributes: cannot fail */
	s->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->done_fd < 0) {
		rc = -errno;
		goto err_sync;
	}
	s->lfd = listen_on(e, &port);
	if (s->lfd < 0) {
		rc = s->lfd;
		goto err_done;
	}
	rc = eng_addr_format(e->endpoint, sizeof(e->endpoint), e->host, port);
	if (!rc)
		rc = -pthread_create(&s->listener, NULL, listen_main, e);
	if (rc)
		goto err_close;
	return 0;

err_close:
	close(s->lfd);
err_done:
	close(s->done_fd);
err_sync:
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->gone);
	return rc;
}

void eng_server_stop(struct eng_engine *e)
{
	struct eng_server *s = &e->srv;
	struct eng_srv_conn *c, *next;

	atomic_store(&s->stopping, 1);
	/* shutdown() wakes a blocked accept() (EINVAL on Linux); close() would not. */
	shutdown(s->lfd, SHUT_RDWR);
	pthread_join(s->listener, NULL);
	for (c = s->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	for (c = s->conns; c; c = next) {
		next = c->next;
		pthread_join(c->tid, NULL);
		close(c->fd);
		free(c);
	}
	s->conns = NULL;
	close(s->lfd);
	close(s->done_fd);
	pthread_cond_destroy(&s->gone);
	pthread_mutex_destroy(&s->lock);
}

/* 1 if a connection accepted before fence gen is still live. Under s->lock. */
static int older_live(const struct eng_server *s, uint64_t gen)
{
	for (const struct eng_srv_conn *c = s->conns; c; c = c->next)
		if (c->gen < gen && !atomic_load(&c->done))
			return 1;
	return 0;
}

int eng_server_fence(struct eng_engine *e, uint64_t deadline_ns)
{
	struct eng_server *s = &e->srv;
	struct timespec ts;
	uint64_t gen;
	int rc = 0;

	lc_monotonic_at(&ts, deadline_ns);
	pthread_mutex_lock(&s->lock);
	gen = ++s->gen;
	/* A thread in a recv takes what is queued, then EOF; a peer's bytes
	 * that come after the FIN reset the connection (RFC 1122). */
	for (struct eng_srv_conn *c = s->conns; c; c = c->next)
		if (!atomic_load(&c->done))
			shutdown(c->fd, SHUT_RDWR);
	while (!rc && older_live(s, gen))
		rc = pthread_cond_timedwait(&s->gone, &s->lock, &ts);
	if (rc && !older_live(s, gen))
		rc = 0;
	pthread_mutex_unlock(&s->lock);
	return rc ? -ETIMEDOUT : 0;
}

uint64_t eng_engine_evicted(const struct eng_engine *e, int handshake)
{
	return atomic_load_explicit(&e->srv.evicted[handshake != 0], memory_order_relaxed);
}
