/*
 * sp_req.c - SP request/reply on nng's wire, the requesting side, on the
 * calling thread (sp_req.h). Every wait is a poll() of at most SLICE_MS,
 * so a call also notices lp_spreq_close between them; a busy connection is
 * shut down by the close, which wakes its poll at once.
 */
#include "sp_req.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "resolve.h"
#include "sp_wire.h"

#define SLICE_MS     100  /* longest single sleep, and the dial retry pause */
#define IDLE_MAX     32	  /* pooled idle connections kept */
#define IDLE_AGE_MS  1000 /* an idle one older closes (the newest stays) */
#define HOST_MAX     256
#define DEFAULT_SPIN 50	  /* µs */
#define SPIN_MAX     1000 /* µs */

struct lp_spreq_conn {
	struct lp_spreq_conn *next;
	int fd;
	uint32_t next_id;
	uint64_t idle_ms; /* when it was last given back */
};

struct lp_spreq {
	bool ipc;
	char host[HOST_MAX], port[8];
	struct sockaddr_un sun;
	size_t max_reply;
	pthread_mutex_t lock;		   /* all below */
	pthread_cond_t cond;		   /* calls went to 0 after closed; or closed */
	struct lp_spreq_conn *idle, *busy; /* idle: the most recently used first */
	unsigned nidle, calls;
	bool closed;
	void (*on_drop)(void *arg);
	void *drop_arg;
};

static atomic_uint spin_us = DEFAULT_SPIN; /* relaxed: a tuning knob */
static atomic_uint open_conns;		   /* relaxed: a gauge */

unsigned lp_spreq_connections(void)
{
	return atomic_load_explicit(&open_conns, memory_order_relaxed);
}

void lp_spreq_busy_poll_set(unsigned us)
{
	atomic_store_explicit(&spin_us, us < SPIN_MAX ? us : SPIN_MAX, memory_order_relaxed);
}

int lp_spreq_alloc(const char *url, size_t max_reply, struct lp_spreq **out)
{
	struct lp_spreq *r = calloc(1, sizeof(*r));
	int rc = -EINVAL;

	if (!r)
		return -ENOMEM;
	if (!strncmp(url, "tcp://", 6)) {
		rc = sp_tcp_split(url, 1, r->host, sizeof(r->host), r->port, sizeof(r->port));
	} else if (!strncmp(url, "ipc://", 6) && url[6] &&
		   strlen(url + 6) < sizeof(r->sun.sun_path)) {
		r->ipc = true;
		r->sun.sun_family = AF_UNIX;
		strcpy(r->sun.sun_path, url + 6);
		rc = 0;
	}
	if (rc) {
		free(r);
		return rc;
	}
	r->max_reply = max_reply;
	pthread_mutex_init(&r->lock, NULL);
	lc_cond_init(&r->cond);
	*out = r;
	return 0;
}

void lp_spreq_on_drop(struct lp_spreq *r, void (*fn)(void *arg), void *arg)
{
	r->on_drop = fn;
	r->drop_arg = arg;
}

static bool closed(struct lp_spreq *r)
{
	bool c;

	pthread_mutex_lock(&r->lock);
	c = r->closed;
	pthread_mutex_unlock(&r->lock);
	return c;
}

/* Wait for events on fd by the deadline, in slices that look at closed.
 * 0 when ready, else -ETIMEDOUT or -ECANCELED. */
static int wait_fd(struct lp_spreq *r, int fd, short events, uint64_t deadline_ms)
{
	struct pollfd p = {.fd = fd, .events = events};

	for (;;) {
		uint64_t now = lc_now_ms();
		int n;

		if (closed(r))
			return -ECANCELED;
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		n = poll(&p, 1, (int)(deadline_ms - now < SLICE_MS ? deadline_ms - now : SLICE_MS));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -ECONNRESET;
	}
}

/* All of iov out (non-blocking fd). 0 or a code. */
static int send_all(struct lp_spreq *r, int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms)
{
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};

	while (mh.msg_iovlen) {
		ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL);
		int rc;

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EAGAIN)
			return -ECONNRESET;
		if (k < 0) {
			if ((rc = wait_fd(r, fd, POLLOUT, deadline_ms)))
				return rc;
			continue;
		}
		while (mh.msg_iovlen && (size_t)k >= mh.msg_iov->iov_len) {
			k -= (ssize_t)mh.msg_iov->iov_len;
			mh.msg_iov++;
			mh.msg_iovlen--;
		}
		if (mh.msg_iovlen) {
			mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + k;
			mh.msg_iov->iov_len -= (size_t)k;
		}
	}
	return 0;
}

/* n bytes in, busy-polling until spin_end_ns, then sleeping. 0 or a code
 * (-ECONNRESET for an end of stream). */
static int recv_all(struct lp_spreq *r, int fd, void *buf, size_t n, uint64_t spin_end_ns,
		    uint64_t deadline_ms)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
		int rc;

		if (k > 0) {
			got += (size_t)k;
		} else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
			return -ECONNRESET;
		} else if (errno == EAGAIN && lc_now_ns() < spin_end_ns) {
			sched_yield(); /* a thread the CPU is wanted for runs first */
		} else if (errno == EAGAIN && (rc = wait_fd(r, fd, POLLIN, deadline_ms))) {
			return rc;
		}
	}
	return 0;
}

/* Connect a non-blocking stream socket to sa by the deadline: the fd, or
 * a code (-ECONNREFUSED for any refusal, to be tried again). */
static int connect_to(struct lp_spreq *r, const struct sockaddr *sa, socklen_t salen,
		      uint64_t deadline_ms, int *out)
{
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int rc, err = 0, one = 1;
	socklen_t elen = sizeof(err);

	if (fd < 0)
		return -ECONNREFUSED;
	rc = connect(fd, sa, salen) ? -errno : 0;
	if (rc == -EINPROGRESS && !(rc = wait_fd(r, fd, POLLOUT, deadline_ms)))
		rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) || err ? -ECONNREFUSED : 0;
	else if (rc)
		rc = -ECONNREFUSED;
	if (rc) {
		close(fd);
		return rc;
	}
	if (sa->sa_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*out = fd;
	return 0;
}

/* One connection attempt (each address of the host in turn): a
 * connected, non-blocking fd past the SP header exchange, or a code
 * (-ECONNREFUSED when nobody, or no REP socket, answers). */
static int dial_once(struct lp_spreq *r, uint64_t deadline_ms, int *out)
{
	const struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	uint8_t hello[SP_HELLO], peer[SP_HELLO];
	struct iovec iov = {hello, sizeof(hello)};
	int fd = -1, rc = -ECONNREFUSED;

	sp_hello(hello, SP_REQ0);
	if (r->ipc) {
		rc = connect_to(r, (const struct sockaddr *)&r->sun, sizeof(r->sun), deadline_ms,
				&fd);
	} else {
		/* A name that does not resolve is tried again as a refusal;
		 * a lookup the deadline cut short ends the call. */
		rc = lc_resolve(r->host, r->port, &hints, deadline_ms, &ai);
		if (!rc || rc == -EHOSTUNREACH)
			rc = -ECONNREFUSED;
		for (const struct addrinfo *a = ai; a && rc == -ECONNREFUSED; a = a->ai_next)
			rc = connect_to(r, a->ai_addr, a->ai_addrlen, deadline_ms, &fd);
		if (ai)
			freeaddrinfo(ai);
	}
	if (!rc)
		rc = send_all(r, fd, &iov, 1, deadline_ms);
	if (!rc)
		rc = recv_all(r, fd, peer, sizeof(peer), 0, deadline_ms);
	if (!rc && !sp_hello_is(peer, SP_REP0))
		rc = -ECONNRESET; /* not a REP socket */
	if (rc && fd >= 0)
		close(fd);
	if (rc)
		return rc == -ECONNRESET ? -ECONNREFUSED : rc;
	atomic_fetch_add_explicit(&open_conns, 1, memory_order_relaxed);
	*out = fd;
	return 0;
}

/* Close c's connection and free it. */
static void conn_close(struct lp_spreq_conn *c)
{
	close(c->fd);
	free(c);
	atomic_fetch_sub_explicit(&open_conns, 1, memory_order_relaxed);
}

/* Dial until connected or the deadline, a pause of SLICE_MS (cut short by
 * a close) after each refusal. */
static int dial(struct lp_spreq *r, uint64_t deadline_ms, int *out)
{
	int rc;

	while ((rc = dial_once(r, deadline_ms, out)) == -ECONNREFUSED) {
		uint64_t now = lc_now_ms();
		struct timespec ts;

		if (now >= deadline_ms)
			return -ETIMEDOUT;
		lc_monotonic_after(&ts,
				   deadline_ms - now < SLICE_MS ? deadline_ms - now : SLICE_MS);
		pthread_mutex_lock(&r->lock);
		if (!r->closed)
			pthread_cond_timedwait(&r->cond, &r->lock, &ts);
		rc = r->closed ? -ECANCELED : 0;
		pthread_mutex_unlock(&r->lock);
		if (rc)
			return rc;
	}
	return rc;
}

/* An idle connection the server has not shut (nothing may be readable). */
static bool still_open(const struct lp_spreq_conn *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};

	return poll(&p, 1, 0) == 0;
}

static void drop(struct lp_spreq *r, struct lp_spreq_conn *c)
{
	conn_close(c);
	if (r->on_drop)
		r->on_drop(r->drop_arg);
}

/* c onto busy, where a close shuts it down, unless r is closed: then
 * -ECANCELED, and c is the caller's to close. Lock held. */
static int to_busy(struct lp_spreq *r, struct lp_spreq_conn *c)
{
	if (r->closed)
		return -ECANCELED;
	c->next = r->busy;
	r->busy = c;
	return 0;
}

/* A connection of r's for one exchange, on busy (no request may leave on
 * one a close could miss). The call is counted. */
static int take(struct lp_spreq *r, uint64_t deadline_ms, struct lp_spreq_conn **out)
{
	struct lp_spreq_conn *c, *dead = NULL;
	int fd, rc = 0;

	pthread_mutex_lock(&r->lock);
	while ((c = r->idle)) {
		r->idle = c->next;
		r->nidle--;
		if (still_open(c))
			break;
		c->next = dead;
		dead = c;
	}
	if (c && (rc = to_busy(r, c))) {
		c->next = r->idle; /* the close frees it */
		r->idle = c;
		r->nidle++;
	}
	pthread_mutex_unlock(&r->lock);
	while (dead) {
		struct lp_spreq_conn *next = dead->next;

		drop(r, dead);
		dead = next;
	}
	if (c) {
		*out = c;
		return rc;
	}
	if (!(c = calloc(1, sizeof(*c))))
		return -ENOMEM;
	if ((rc = dial(r, deadline_ms, &fd))) {
		free(c);
		return rc;
	}
	c->fd = fd;
	pthread_mutex_lock(&r->lock);
	rc = to_busy(r, c);
	pthread_mutex_unlock(&r->lock);
	if (rc)
		conn_close(c);
	else
		*out = c;
	return rc;
}

/* Unlink the idle connections past the newest that have waited longer
 * than IDLE_AGE_MS (a burst's extra ones); the list of them. Lock held. */
static struct lp_spreq_conn *aged(struct lp_spreq *r, uint64_t now)
{
	struct lp_spreq_conn **pp = r->idle ? &r->idle->next : &r->idle, *old = NULL, *c;

	while ((c = *pp)) {
		if (now - c->idle_ms <= IDLE_AGE_MS) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		r->nidle--;
		c->next = old;
		old = c;
	}
	return old;
}

/* c leaves busy: pooled when its exchange went well, else closed. */
static void give(struct lp_spreq *r, struct lp_spreq_conn *c, bool ok)
{
	struct lp_spreq_conn **pp = &r->busy, *old;
	uint64_t now;

	pthread_mutex_lock(&r->lock);
	now = lc_now_ms(); /* under the lock: no idle_ms is newer */
	while (*pp != c)
		pp = &(*pp)->next;
	*pp = c->next;
	ok = ok && !r->closed && r->nidle < IDLE_MAX;
	if (ok) {
		c->idle_ms = now;
		c->next = r->idle;
		r->idle = c;
		r->nidle++;
	} else {
		c->next = NULL;
	}
	old = aged(r, now);
	pthread_mutex_unlock(&r->lock);
	if (!ok) {
		c->next = old;
		old = c;
	}
	while (old) {
		struct lp_spreq_conn *next = old->next;

		conn_close(old);
		old = next;
	}
}

/* The call counted in (0), unless r is closed. */
static int call_enter(struct lp_spreq *r)
{
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	if (r->closed)
		rc = -ECANCELED;
	else
		r->calls++;
	pthread_mutex_unlock(&r->lock);
	return rc;
}

static void call_leave(struct lp_spreq *r)
{
	pthread_mutex_lock(&r->lock);
	if (!--r->calls && r->closed)
		pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

int lp_spreq_begin(struct lp_spreq *r, uint64_t deadline_ms, struct lp_spreq_xchg *call)
{
	int rc;

	*call = (struct lp_spreq_xchg){.deadline_ms = deadline_ms};
	if ((rc = call_enter(r)))
		return rc;
	if ((rc = take(r, deadline_ms, &call->c))) {
		call_leave(r);
		return rc;
	}
	return 0;
}

int lp_spreq_send(struct lp_spreq *r, struct lp_spreq_xchg *call, const void *req, size_t len)
{
	struct lp_spreq_conn *c = call->c;
	uint8_t head[1 + 8 + 4];
	size_t off = r->ipc ? 1 : 0;
	uint64_t len_be = htobe64(len + 4);
	uint32_t id_be;
	struct iovec iov[2] = {{head, off + 12}, {(void *)req, len}};

	call->id = c->next_id++ | SP_ID_TOP;
	id_be = htobe32(call->id);
	head[0] = SP_IPC_MSG;
	memcpy(head + off, &len_be, 8);
	memcpy(head + off + 8, &id_be, 4);
	return send_all(r, c->fd, iov, 2, call->deadline_ms);
}

/* The reply to call on its connection. 0 with it, or a code. */
static int receive(struct lp_spreq *r, const struct lp_spreq_xchg *call, void **reply,
		   size_t *reply_len)
{
	size_t off = r->ipc ? 1 : 0;
	uint64_t spin_end =
	    lc_now_ns() + 1000ull * atomic_load_explicit(&spin_us, memory_order_relaxed);
	uint32_t id_be = htobe32(call->id);
	uint8_t in[1 + 8 + 4];
	uint64_t len_be, rlen;
	void *body;
	int rc;

	if ((rc = recv_all(r, call->c->fd, in, off + 12, spin_end, call->deadline_ms)))
		return rc;
	memcpy(&len_be, in + off, 8);
	rlen = be64toh(len_be);
	/* untrusted: our id back, and a length we accept */
	if ((off && in[0] != SP_IPC_MSG) || memcmp(in + off + 8, &id_be, 4) || rlen < 4 ||
	    rlen - 4 > r->max_reply)
		return -ECONNRESET;
	if (!(body = malloc(rlen - 4 ? rlen - 4 : 1)))
		return -ENOMEM;
	if ((rc = recv_all(r, call->c->fd, body, rlen - 4, spin_end, call->deadline_ms))) {
		free(body);
		return rc;
	}
	*reply = body;
	*reply_len = rlen - 4;
	return 0;
}

int lp_spreq_end(struct lp_spreq *r, struct lp_spreq_xchg *call, int sent, void **reply,
		 size_t *reply_len)
{
	int rc = sent ? sent : receive(r, call, reply, reply_len);

	if (rc == -ECONNRESET && closed(r))
		rc = -ECANCELED; /* our own close shut it */
	give(r, call->c, !rc);
	call->c = NULL;
	if (rc == -ECONNRESET && r->on_drop)
		r->on_drop(r->drop_arg);
	call_leave(r);
	return rc;
}

int lp_spreq_call(struct lp_spreq *r, const void *req, size_t len, void **reply, size_t *reply_len,
		  uint64_t deadline_ms)
{
	struct lp_spreq_xchg call;
	int rc;

	if ((rc = lp_spreq_begin(r, deadline_ms, &call)))
		return rc;
	return lp_spreq_end(r, &call, lp_spreq_send(r, &call, req, len), reply, reply_len);
}

int lp_spreq_dial(struct lp_spreq *r, uint64_t deadline_ms)
{
	struct lp_spreq_conn *c;
	int fd, rc;

	if ((rc = call_enter(r)))
		return rc;
	if (!(c = calloc(1, sizeof(*c)))) {
		rc = -ENOMEM;
	} else if ((rc = dial_once(r, deadline_ms, &fd))) {
		free(c);
	} else {
		c->fd = fd;
		pthread_mutex_lock(&r->lock);
		c->next = r->busy;
		r->busy = c;
		pthread_mutex_unlock(&r->lock);
		give(r, c, true);
	}
	call_leave(r);
	return rc;
}

void lp_spreq_close(struct lp_spreq *r)
{
	struct lp_spreq_conn *idle;

	pthread_mutex_lock(&r->lock);
	r->closed = true;
	for (struct lp_spreq_conn *c = r->busy; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR); /* wakes its poll */
	pthread_cond_broadcast(&r->cond);   /* and dialers' pauses */
	while (r->calls)
		pthread_cond_wait(&r->cond, &r->lock);
	idle = r->idle;
	r->idle = NULL;
	r->nidle = 0;
	pthread_mutex_unlock(&r->lock);
	while (idle) {
		struct lp_spreq_conn *next = idle->next;

		conn_close(idle);
		idle = next;
	}
}

void lp_spreq_free(struct lp_spreq *r)
{
	if (!r)
		return;
	lp_spreq_close(r);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
