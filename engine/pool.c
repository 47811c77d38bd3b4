/*
 * pool.c - the client's connections: a small hash of peers by endpoint, each
 * with its resolved address (DNS once per peer) and a stack of idle
 * connections (a socket and, on a keyed engine, its session). A transfer
 * takes an idle connection or dials a new one, and gives it back only after
 * a clean request/reply.
 */
#include "eng_int.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

struct eng_peer {
	struct eng_peer *next;
	char endpoint[ENG_ENDPOINT_MAX];
	struct sockaddr_storage addr;
	socklen_t addrlen;
	unsigned nidle;
	struct eng_cconn *idle[]; /* max_idle slots; the most recently used on top */
};

static unsigned bucket_of(const char *endpoint)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (const unsigned char *s = (const unsigned char *)endpoint; *s; s++)
		h = (h ^ *s) * 16777619u;
	return h & (ENG_POOL_BUCKETS - 1);
}

static struct eng_peer *find_peer(struct eng_pool *p, const char *endpoint)
{
	struct eng_peer *peer = p->bucket[bucket_of(endpoint)];

	while (peer && strcmp(peer->endpoint, endpoint))
		peer = peer->next;
	return peer;
}

/* Remember a resolved peer; out of memory only means no caching. Lock held. */
static void add_peer(struct eng_pool *p, const char *endpoint, const struct sockaddr_storage *sa,
		     socklen_t len)
{
	unsigned b = bucket_of(endpoint);
	struct eng_peer *peer;

	peer = calloc(1, sizeof(*peer) + p->max_idle * sizeof(peer->idle[0]));
	if (!peer)
		return;
	strcpy(peer->endpoint, endpoint);
	peer->addr = *sa;
	peer->addrlen = len;
	peer->next = p->bucket[b];
	p->bucket[b] = peer;
}

/* Connect fd to sa before deadline_ns: 0 or -errno. */
static int dial_fd(int fd, const struct sockaddr_storage *sa, socklen_t len, uint64_t deadline_ns)
{
	socklen_t elen = sizeof(int);
	int err = 0, rc;

	rc = eng_sock_nodelay(fd);
	if (rc)
		return rc;
	eng_sock_bufs(fd);
	if (connect(fd, (const struct sockaddr *)sa, len) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	rc = eng_io_wait(fd, POLLOUT, deadline_ns);
	if (rc)
		return rc;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		err = errno;
	return -err;
}

/* A socket connected to sa, published in live (if not NULL) while it
 * connects: a stop shuts it down, which ends a connect the peer never
 * answers (SYNs dropped) at once; after a stop, none is made (-ECANCELED).
 * The socket, or -errno. */
static int dial(struct eng_engine *e, const struct sockaddr_storage *sa, socklen_t len,
		uint64_t deadline_ns, int *live)
{
	int fd, rc;

	fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A socket shut down before its connect still connects, and polls
	 * as done at once: not one to hand out. */
	rc = live && eng_exec_live(e, live, fd) ? -ECANCELED : dial_fd(fd, sa, len, deadline_ns);
	if (live)
		eng_exec_live(e, live, -1);
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

int eng_pool_init(struct eng_pool *p, unsigned max_idle)
{
	int rc;

	memset(p->bucket, 0, sizeof(p->bucket));
	p->max_idle = max_idle;
	rc = pthread_mutex_init(&p->lock, NULL);
	return -rc;
}

void eng_pool_fini(struct eng_pool *p)
{
	for (unsigned b = 0; b < ENG_POOL_BUCKETS; b++) {
		struct eng_peer *peer = p->bucket[b], *next;

		for (; peer; peer = next) {
			next = peer->next;
			for (unsigned i = 0; i < peer->nidle; i++)
				eng_cconn_close(peer->idle[i]);
			free(peer);
		}
		p->bucket[b] = NULL;
	}
	pthread_mutex_destroy(&p->lock);
}

void eng_cconn_close(struct eng_cconn *c)
{
	if (!c)
		return;
	atomic_fetch_sub_explicit(&c->pool->open, 1, memory_order_relaxed);
	close(c->fd);
	sodium_memzero(&c->s, sizeof(c->s));
	free(c);
}

/*
 * Whether idle connection c can carry a request: nothing has come on it
 * since its last reply. A byte would be read as the next reply's first
 * (a peer that says more than it was asked has no say in what comes
 * next); an end of stream or an error means the peer is gone. One
 * syscall, against a request sent and failed.
 */
static int idle_clean(const struct eng_cconn *c)
{
	char b;

	return recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
	       (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* A new connection of e's pool to sa; 0 and *out, or -errno. */
static int dial_conn(struct eng_engine *e, const struct sockaddr_storage *sa, socklen_t len,
		     uint64_t deadline_ns, int *live, struct eng_cconn **out)
{
	struct eng_cconn *c = calloc(1, sizeof(*c));
	struct eng_pool *p = &e->pool;

	if (!c)
		return -ENOMEM;
	c->fd = dial(e, sa, len, deadline_ns, live);
	if (c->fd < 0) {
		int rc = c->fd;

		free(c);
		return rc;
	}
	c->pool = p;
	atomic_fetch_add_explicit(&p->open, 1, memory_order_relaxed);
	*out = c;
	return 0;
}

int eng_pool_take(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, int *pooled,
		  struct eng_cconn **out, int *live)
{
	struct eng_pool *p = &e->pool;
	struct sockaddr_storage sa;
	struct eng_peer *peer;
	socklen_t len;
	int rc;

	if (strlen(endpoint) >= ENG_ENDPOINT_MAX)
		return -EINVAL;
	*pooled = 0;
	pthread_mutex_lock(&p->lock);
	peer = find_peer(p, endpoint);
	while (peer && peer->nidle) {
		struct eng_cconn *c = peer->idle[--peer->nidle];

		pthread_mutex_unlock(&p->lock);
		if (idle_clean(c)) {
			*out = c;
			*pooled = 1;
			return 0;
		}
		eng_cconn_close(c);
		pthread_mutex_lock(&p->lock);
		peer = find_peer(p, endpoint);
	}
	if (peer) {
		sa = peer->addr;
		len = peer->addrlen;
	}
	pthread_mutex_unlock(&p->lock);
	if (!peer) {
		/* Resolve without the lock: DNS must not stall transfers to other peers. */
		rc = eng_addr_resolve(endpoint, deadline_ns, &sa, &len);
		if (rc)
			return rc;
		pthread_mutex_lock(&p->lock);
		if (!find_peer(p, endpoint))
			add_peer(p, endpoint, &sa, len);
		pthread_mutex_unlock(&p->lock);
	}
	return dial_conn(e, &sa, len, deadline_ns, live, out);
}

void eng_pool_give(struct eng_pool *p, const char *endpoint, struct eng_cconn *c)
{
	struct eng_peer *peer;

	pthread_mutex_lock(&p->lock);
	peer = find_peer(p, endpoint);
	if (peer && peer->nidle < p->max_idle) {
		peer->idle[peer->nidle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	eng_cconn_close(c);
}

void eng_pool_flush(struct eng_pool *p, const char *endpoint)
{
	struct eng_peer *peer;

	pthread_mutex_lock(&p->lock);
	peer = find_peer(p, endpoint);
	/* close() of an idle socket does not block: fine under the lock. */
	for (; peer && peer->nidle; peer->nidle--)
		eng_cconn_close(peer->idle[peer->nidle - 1]);
	pthread_mutex_unlock(&p->lock);
}

unsigned eng_engine_peer_conns(const struct eng_engine *e)
{
	return atomic_load_explicit(&e->pool.open, memory_order_relaxed);
}
