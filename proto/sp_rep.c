/*
 * sp_rep.c - SP request/reply on nng's sp-tcp wire, the replying side
 * (sp_rep.h). Workers block in epoll_wait on one set holding the listener,
 * every connection (each armed EPOLLONESHOT, so exactly one worker owns a
 * ready connection until it arms it again) and a stop eventfd: epoll
 * wakes one waiter a write, so each worker that sees it stopping writes it
 * again for the next. A connection is touched only by the worker that owns
 * it, or by lp_sprep_stop once the workers are gone; the list of them is
 * for that and for making room at the cap (evict_oldest, which only shuts
 * a socket down). A request's buffer grows with the bytes that come, not
 * with the length announced.
 */
#include "sp_rep.h"

#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "sp_wire.h"

#define HOST_MAX     256
#define BT_MAX	     (4 * SP_HOPS_MAX)
#define BUF_FIRST    (64u << 10)  /* a request's buffer at first */
#define BUF_KEEP     (256u << 10) /* a larger one is freed once answered */
#define ACCEPT_GAP   10000	  /* µs: a pause when out of fds */
#define KEEP_IDLE_S  60		  /* TCP keepalive: a silent peer probed after, */
#define KEEP_INTVL_S 10		  /* every, */
#define KEEP_CNT     3		  /* and given up after as many unanswered */

enum cstate {
	C_HELLO, /* reading the peer's opening header into head */
	C_LEN,	 /* reading a message's length into head */
	C_BODY,	 /* reading its bytes into m */
	C_SEND,	 /* sending a reply, sent bytes of it so far */
};

struct conn {
	struct conn *prev, *next; /* s->conns, under s->lock */
	pthread_mutex_t own;	  /* held by the worker serving it, see arm() */
	uint64_t active_ms;	  /* its last request answered (or accept); relaxed */
	bool evicted;		  /* shut down to make room; under s->lock */
	int fd;
	enum cstate st;
	uint8_t head[SP_HELLO]; /* C_HELLO, C_LEN: bytes so far in got */
	size_t got;		/* C_BODY: of want */
	uint64_t want;
	struct lp_spmsg m;
	uint8_t out[8 + BT_MAX]; /* C_SEND: the reply's length and backtrace */
	size_t outlen, sent;
};

struct lp_sprep {
	struct lp_sprep_cfg cfg;
	int lfd, efd, stopfd;
	uint16_t port;
	pthread_t *thr;
	unsigned nthr;
	pthread_mutex_t lock; /* conns, nconns */
	struct conn *conns;
	unsigned nconns;
	uint64_t warned_ms; /* last warn() line */
};

int lp_spmsg_reply(struct lp_spmsg *m, size_t len)
{
	if (len > m->cap) {
		void *p = malloc(len);

		if (!p)
			return -ENOMEM;
		free(m->body);
		m->body = p;
		m->cap = len;
	}
	m->len = len;
	return 0;
}

/* Room in m for the request's next bytes (got of want so far, kept). */
static int grow(struct lp_spmsg *m, size_t got, size_t want)
{
	size_t cap = m->cap > BUF_FIRST ? m->cap : BUF_FIRST;
	uint8_t *p;

	while (cap < want && cap <= got)
		cap *= 2;
	cap = cap < want ? cap : want;
	if (cap <= m->cap)
		return 0;
	if (!(p = realloc(m->body, cap)))
		return -ENOMEM;
	m->body = p;
	m->cap = cap;
	return 0;
}

/*
 * Hand c to the next worker epoll wakes for events; c->own held. That
 * worker may wake while this epoll_ctl is still returning: it takes c->own
 * before it touches c, so it waits for this one to let go (and race
 * checkers, which do not see epoll's ordering, see the lock's).
 */
static int arm(struct lp_sprep *s, struct conn *c, uint32_t events)
{
	struct epoll_event ev = {.events = events | EPOLLONESHOT, .data.ptr = c};

	return epoll_ctl(s->efd, EPOLL_CTL_MOD, c->fd, &ev) ? -errno : 0;
}

static void conn_free(struct conn *c)
{
	close(c->fd);
	pthread_mutex_destroy(&c->own);
	free(c->m.body);
	free(c);
}

/* c unlinked and closed (it is out of the epoll set with its fd). */
static void conn_drop(struct lp_sprep *s, struct conn *c)
{
	pthread_mutex_lock(&s->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	pthread_mutex_unlock(&s->lock);
	conn_free(c);
}

/* Read into buf until it holds n bytes (*got so far). 1 when it does, 0
 * when the socket ran dry first, or -ECONNRESET (end of stream, error). */
static int read_to(int fd, void *buf, size_t n, size_t *got)
{
	while (*got < n) {
		ssize_t k = recv(fd, (char *)buf + *got, n - *got, 0);

		if (k > 0)
			*got += (size_t)k;
		else if (k < 0 && errno == EINTR)
			continue;
		else if (k < 0 && errno == EAGAIN)
			return 0;
		else
			return -ECONNRESET;
	}
	return 1;
}

/* Send what is left of c's reply: 1 when all of it went, 0 when the
 * socket is full, -ECONNRESET. */
static int send_rest(struct conn *c)
{
	for (;;) {
		size_t total = c->outlen + c->m.len, skip = c->sent;
		struct iovec iov[2];
		struct msghdr mh = {.msg_iov = iov};
		ssize_t k;

		if (skip >= total)
			return 1;
		if (skip < c->outlen) {
			iov[mh.msg_iovlen++] = (struct iovec){c->out + skip, c->outlen - skip};
			skip = 0;
		} else {
			skip -= c->outlen;
		}
		if (c->m.len > skip)
			iov[mh.msg_iovlen++] = (struct iovec){c->m.body + skip, c->m.len - skip};
		k = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
		if (k > 0)
			c->sent += (size_t)k;
		else if (k < 0 && errno == EAGAIN)
			return 0;
		else if (!(k < 0 && errno == EINTR))
			return -ECONNRESET;
	}
}

/* The request in c->m, its backtrace taken off into c->out after the
 * reply's length to come; -EPROTO for a backtrace without its last word. */
static int take_backtrace(struct conn *c)
{
	size_t bt = 0;
	uint32_t w;

	do {
		if (bt + 4 > c->m.len || bt == BT_MAX)
			return -EPROTO;
		memcpy(&w, c->m.body + bt, 4);
		bt += 4;
	} while (!(be32toh(w) & SP_ID_TOP));
	memcpy(c->out + 8, c->m.body, bt);
	c->outlen = 8 + bt;
	c->m.len -= bt;
	memmove(c->m.body, c->m.body + bt, c->m.len);
	return 0;
}

/* A whole request in c->m: run the handler, start sending its reply. */
static int answer(struct lp_sprep *s, struct conn *c)
{
	uint64_t len_be;
	int rc = take_backtrace(c);

	if (!rc && c->m.len > s->cfg.max_request)
		rc = -EPROTO;
	if (!rc)
		rc = s->cfg.fn(s->cfg.arg, &c->m);
	if (rc)
		return rc;
	len_be = htobe64(c->outlen - 8 + c->m.len);
	memcpy(c->out, &len_be, 8);
	c->sent = 0;
	c->st = C_SEND;
	return 0;
}

/*
 * Move c along as far as its socket allows: 0 with c armed again for what
 * it waits for, or a code, and c is to be dropped.
 */
static int serve(struct lp_sprep *s, struct conn *c)
{
	uint64_t len;
	int rc;

	for (;;) {
		switch (c->st) {
		case C_HELLO:
			if ((rc = read_to(c->fd, c->head, SP_HELLO, &c->got)) <= 0)
				return rc ? rc : arm(s, c, EPOLLIN);
			if (!sp_hello_is(c->head, SP_REQ0))
				return -EPROTO;
			c->st = C_LEN;
			c->got = 0;
			break;
		case C_LEN:
			if ((rc = read_to(c->fd, c->head, 8, &c->got)) <= 0)
				return rc ? rc : arm(s, c, EPOLLIN);
			memcpy(&len, c->head, 8);
			len = be64toh(len);
			if (len < 4 || len > s->cfg.max_request + BT_MAX)
				return -EPROTO;
			c->want = len;
			c->got = 0;
			c->st = C_BODY;
			break;
		case C_BODY:
			if ((rc = grow(&c->m, c->got, c->want)))
				return rc;
			rc = read_to(c->fd, c->m.body, c->m.cap < c->want ? c->m.cap : c->want,
				     &c->got);
			if (rc <= 0)
				return rc ? rc : arm(s, c, EPOLLIN);
			if (c->got < c->want)
				break; /* the buffer is full: grow it */
			c->m.len = c->want;
			if ((rc = answer(s, c)))
				return rc;
			break;
		case C_SEND:
			if ((rc = send_rest(c)) <= 0)
				return rc ? rc : arm(s, c, EPOLLOUT);
			LC_WRITE_ONCE(c->active_ms, lc_now_ms());
			if (c->m.cap > BUF_KEEP) {
				free(c->m.body);
				c->m = (struct lp_spmsg){0};
			}
			c->st = C_LEN;
			c->got = 0;
			/* the next request is read when it comes: one more
			 * recv here would mostly find nothing */
			return arm(s, c, EPOLLIN);
		}
	}
}

/* Log at most once a second what happened to connections. */
static void warn(struct lp_sprep *s, const char *what)
{
	uint64_t now = lc_now_ms(), last = LC_READ_ONCE(s->warned_ms);

	if (now - last >= 1000 && lc_cas(&s->warned_ms, &last, now))
		LC_WARN("rpc", "connections: %s (%u open, at most %u)", what,
			lp_sprep_connections(s), s->cfg.max_conns);
}

/* c on the list, unless as many are open as served; 0 or -EBUSY. */
/*
 * At the cap, make room: shut down the connection answered least recently
 * (idle, or a peer that never finished a request) - its owner, or the next
 * worker its end of stream wakes, drops it. The fd stays open until then:
 * conn_drop unlinks under s->lock, held here. 0, or -EBUSY when every
 * connection is already being shut. Lock held.
 */
static int evict_oldest(struct lp_sprep *s)
{
	struct conn *old = NULL;

	for (struct conn *c = s->conns; c; c = c->next)
		if (!c->evicted &&
		    (!old || LC_READ_ONCE(c->active_ms) <= LC_READ_ONCE(old->active_ms)))
			old = c;
	if (!old)
		return -EBUSY;
	old->evicted = true;
	shutdown(old->fd, SHUT_RDWR);
	return 0;
}

/* c on the list, making room at the cap; 0 or -EBUSY. */
static int conn_link(struct lp_sprep *s, struct conn *c)
{
	bool full;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	full = s->nconns >= s->cfg.max_conns;
	if (full)
		rc = evict_oldest(s);
	if (!rc) {
		c->next = s->conns;
		if (c->next)
			c->next->prev = c;
		s->conns = c;
		s->nconns++;
	}
	pthread_mutex_unlock(&s->lock);
	if (full)
		warn(s, rc ? "at the cap, and every one is being shut: a new one closed"
			   : "at the cap: the one answered least recently shut");
	return rc;
}

/* A new connection of fd: our opening header sent, served from now on. */
static void conn_add(struct lp_sprep *s, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT};
	uint8_t hello[SP_HELLO];
	struct conn *c = calloc(1, sizeof(*c));
	int one = 1;

	if (!c) {
		close(fd);
		return;
	}
	c->fd = fd;
	c->st = C_HELLO;
	c->active_ms = lc_now_ms();
	pthread_mutex_init(&c->own, NULL);
	if (conn_link(s, c)) {
		conn_free(c);
		return;
	}
	sp_hello(hello, SP_REP0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a peer gone without a word (a host down, a partition) is found */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &(int){KEEP_IDLE_S}, sizeof(int));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &(int){KEEP_INTVL_S}, sizeof(int));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &(int){KEEP_CNT}, sizeof(int));
	ev.data.ptr = c;
	/* a new socket's buffer takes 8 bytes at once */
	pthread_mutex_lock(&c->own);
	if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) == sizeof(hello) &&
	    !epoll_ctl(s->efd, EPOLL_CTL_ADD, fd, &ev)) {
		pthread_mutex_unlock(&c->own);
		return;
	}
	pthread_mutex_unlock(&c->own);
	conn_drop(s, c);
}

/* Take every connection waiting, then listen again. */
static void accept_all(struct lp_sprep *s)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = s};
	int fd;

	while ((fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0 ||
	       errno == EINTR || errno == ECONNABORTED)
		if (fd >= 0)
			conn_add(s, fd);
	/* out of fds or memory: the backlog waits a while (another error is
	 * the failed connection's own, and the next accept goes on) */
	if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
		warn(s, strerror(errno));
		usleep(ACCEPT_GAP);
	}
	if (epoll_ctl(s->efd, EPOLL_CTL_MOD, s->lfd, &ev))
		LC_ERROR("rpc", "cannot listen again: %s", strerror(errno));
}

/* Wake one more worker blocked in epoll_wait to see the stop. */
static void pass_stop(struct lp_sprep *s)
{
	uint64_t one = 1;

	if (write(s->stopfd, &one, sizeof(one)) != sizeof(one))
		LC_WARN("rpc", "cannot wake the workers: %s", strerror(errno));
}

static void *worker(void *arg)
{
	struct lp_sprep *s = arg;
	struct epoll_event ev;
	struct conn *c;
	int rc;

	for (;;) {
		int n = epoll_wait(s->efd, &ev, 1, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			LC_ERROR("rpc", "a worker stops: epoll_wait: %s", strerror(errno));
		if (n < 0 || !ev.data.ptr) {
			pass_stop(s);
			return NULL;
		}
		if (ev.data.ptr == s) {
			accept_all(s);
			continue;
		}
		c = ev.data.ptr;
		pthread_mutex_lock(&c->own);
		rc = serve(s, c);
		pthread_mutex_unlock(&c->own); /* armed again (c is not ours), or */
		if (rc)
			conn_drop(s, c); /* not armed: no one else can have it */
	}
}

/* Bind and listen on url's first address that takes it. */
static int listen_on(struct lp_sprep *s, const char *url)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
			*ai = NULL;
	char host[HOST_MAX], port[8];
	struct sockaddr_storage sa;
	socklen_t salen = sizeof(sa);
	int rc = sp_tcp_split(url, 0, host, sizeof(host), port, sizeof(port)), one = 1;

	if (rc)
		return rc;
	if (getaddrinfo(host, port, &hints, &ai))
		return -EINVAL;
	rc = -EADDRNOTAVAIL;
	for (const struct addrinfo *a = ai; a && rc; a = a->ai_next) {
		int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			rc = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		rc = bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, SOMAXCONN) ? -errno : 0;
		if (rc)
			close(fd);
		else
			s->lfd = fd;
	}
	freeaddrinfo(ai);
	if (rc)
		return rc;
	if (!getsockname(s->lfd, (struct sockaddr *)&sa, &salen))
		s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
							 : ((struct sockaddr_in *)&sa)->sin_port);
	return 0;
}

/* The epoll set with the listener and the stop fd, and the workers. */
static int serve_start(struct lp_sprep *s)
{
	struct epoll_event lev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = s};
	struct epoll_event sev = {.events = EPOLLIN, .data.ptr = NULL};
	int rc = 0;

	if ((s->efd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    epoll_ctl(s->efd, EPOLL_CTL_ADD, s->lfd, &lev) ||
	    epoll_ctl(s->efd, EPOLL_CTL_ADD, s->stopfd, &sev))
		return -errno;
	if (!(s->thr = calloc(s->cfg.workers, sizeof(*s->thr))))
		return -ENOMEM;
	for (; s->nthr < s->cfg.workers && !rc; s->nthr += !rc)
		rc = -pthread_create(&s->thr[s->nthr], NULL, worker, s);
	return rc;
}

int lp_sprep_start(const char *url, const struct lp_sprep_cfg *cfg, struct lp_sprep **out)
{
	struct lp_sprep *s;
	int rc;

	if (!cfg->workers || !cfg->max_conns || !cfg->fn || cfg->max_request > SIZE_MAX - BT_MAX)
		return -EINVAL;
	if (!(s = calloc(1, sizeof(*s))))
		return -ENOMEM;
	s->cfg = *cfg;
	s->lfd = s->efd = s->stopfd = -1;
	pthread_mutex_init(&s->lock, NULL);
	rc = listen_on(s, url);
	if (!rc)
		rc = serve_start(s);
	if (rc) {
		lp_sprep_stop(s);
		return rc;
	}
	*out = s;
	return 0;
}

uint16_t lp_sprep_port(const struct lp_sprep *s)
{
	return s->port;
}

unsigned lp_sprep_connections(const struct lp_sprep *s)
{
	struct lp_sprep *w = (struct lp_sprep *)s;
	unsigned n;

	pthread_mutex_lock(&w->lock);
	n = w->nconns;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void lp_sprep_stop(struct lp_sprep *s)
{
	if (!s)
		return;
	if (s->nthr)
		pass_stop(s);
	for (unsigned i = 0; i < s->nthr; i++)
		pthread_join(s->thr[i], NULL);
	while (s->conns) {
		struct conn *c = s->conns;

		s->conns = c->next;
		conn_free(c);
	}
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->efd >= 0)
		close(s->efd);
	if (s->stopfd >= 0)
		close(s->stopfd);
	free(s->thr);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
