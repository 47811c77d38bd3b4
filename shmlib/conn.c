/*
 * conn.c - proxy sessions: connect and handshake over the UNIX socket, map
 * and validate the region the proxy sends, refcount it, notice the proxy's
 * death by the socket's hang-up, and reconnect transparently on the next
 * call. A broken session is never reused: a proxy that timed out may still
 * write into its region, so it is only unmapped when its last user leaves.
 */
#include "shm_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "futex.h"
#include "log.h"
#include "uds.h"

#define SHM_LAT_INIT_NS 10000u /* a first guess: spin 20 µs */

static int range_ok(uint64_t off, uint64_t len, uint64_t lo, uint64_t size)
{
	return off >= lo && len <= size && off <= size - len && off % 8 == 0;
}

/* The header as the proxy wrote it, copied once, checked before any use. */
static int hdr_check(const struct lc_shm_hdr *h, const struct lc_welcome *w)
{
	uint64_t part[4][2] = {
	    {h->ring_off, sizeof(struct lc_ring_ctl)},
	    {h->sqes_off, (uint64_t)h->ring_entries * sizeof(struct lc_sqe)},
	    {h->slots_off, (uint64_t)h->slot_count * sizeof(struct lc_cslot)},
	    {h->arena_off, h->arena_size},
	};

	if (h->magic != LC_SHM_MAGIC || h->version != LC_PROTO_VERSION ||
	    h->region_size != w->region_size || h->client_id != w->client_id ||
	    h->hdr_size < sizeof(*h) || h->hdr_size > h->region_size)
		return -1;
	if (!h->ring_entries || (h->ring_entries & (h->ring_entries - 1)) || !h->slot_count ||
	    h->arena_size < SHM_ARENA_ALIGN || !h->max_batch || !h->max_segs)
		return -1;
	for (int i = 0; i < 4; i++) {
		if (!range_ok(part[i][0], part[i][1], h->hdr_size, h->region_size))
			return -1;
		for (int j = 0; j < i; j++)
			if (part[i][0] < part[j][0] + part[j][1] &&
			    part[j][0] < part[i][0] + part[i][1])
				return -1;
	}
	return 0;
}

/* The proxy's HTTP address, when it tells one we can print and use:
 * NUL-terminated, no spaces or control bytes. Otherwise "" (not told). */
static void http_addr_take(struct shm_conn *cn, const struct lc_shm_hdr *h)
{
	size_t n = strnlen(h->http_addr, sizeof(h->http_addr));

	cn->http_addr[0] = '\0';
	if (n == sizeof(h->http_addr))
		return;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)h->http_addr[i] <= ' ' || h->http_addr[i] == 0x7f)
			return;
	memcpy(cn->http_addr, h->http_addr, n + 1);
}

/* Map the memfd; the proxy must have sealed it against shrinking, so no
 * access can ever SIGBUS. */
static int region_map(struct shm_conn *cn, int memfd, const struct lc_welcome *w)
{
	struct lc_shm_hdr h;
	struct stat st;
	int seals;

	seals = fcntl(memfd, F_GET_SEALS);
	if (fstat(memfd, &st) < 0 || seals < 0 || !(seals & F_SEAL_SHRINK) ||
	    (uint64_t)st.st_size != w->region_size || w->region_size < sizeof(h)) {
		LC_ERROR(SHM_LOG, "proxy region: bad size or seals");
		return LUNAR_ERR_PROTOCOL;
	}
	cn->base = mmap(NULL, w->region_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (cn->base == MAP_FAILED) {
		cn->base = NULL;
		LC_ERROR(SHM_LOG, "mmap %llu bytes: %s", (unsigned long long)w->region_size,
			 strerror(errno));
		return LUNAR_ERR_INTERNAL;
	}
	cn->size = w->region_size;
	memcpy(&h, cn->base, sizeof(h));
	if (hdr_check(&h, w)) {
		LC_ERROR(SHM_LOG, "proxy region: bad header");
		return LUNAR_ERR_PROTOCOL;
	}
	cn->ring = (struct lc_ring_ctl *)(cn->base + h.ring_off);
	cn->prod = (struct lc_ring_prod){.ctl = cn->ring};
	cn->sqes = (struct lc_sqe *)(cn->base + h.sqes_off);
	cn->slots = (struct lc_cslot *)(cn->base + h.slots_off);
	cn->entries = h.ring_entries;
	cn->slot_count = h.slot_count;
	cn->max_batch = h.max_batch;
	cn->max_segs = h.max_segs;
	cn->arena_off = h.arena_off;
	cn->arena_size = h.arena_size;
	http_addr_take(cn, &h);
	return 0;
}

/* Client-private state over the mapped region: free slots and the arena. */
static int conn_init_local(struct shm_conn *cn)
{
	if (shm_bits_init(&cn->free_slots, cn->slot_count))
		return LUNAR_ERR_INTERNAL;
	return shm_arena_init(cn);
}

static struct shm_conn *conn_alloc(void)
{
	struct shm_conn *cn = calloc(1, sizeof(*cn));

	if (!cn)
		return NULL;
	cn->refs = 1;
	cn->sock = -1;
	cn->evfd = -1;
	for (size_t op = 0; op < LC_OP_MAX; op++)
		cn->lat_ns[op] = SHM_LAT_INIT_NS;
	pthread_mutex_init(&cn->lock, NULL);
	lc_cond_init(&cn->cond);
	return cn;
}

/* The session's memory: the region and what tracks it here. Idempotent. */
static void conn_unmap(struct shm_conn *cn)
{
	shm_arena_fini(cn);
	shm_bits_fini(&cn->free_slots);
	if (cn->base)
		munmap(cn->base, cn->size);
	cn->base = NULL;
}

/* The session's resources; the struct stays (see struct shm_conn). */
static void conn_release(struct shm_conn *cn)
{
	shm_fork_close(cn);
	conn_unmap(cn);
}

static void conn_free(struct shm_conn *cn)
{
	pthread_cond_destroy(&cn->cond);
	pthread_mutex_destroy(&cn->lock);
	free(cn);
}

static int hello_send(const struct lunar_client *c, int sock)
{
	struct lc_hello h = {
	    .magic = LC_SHM_MAGIC,
	    .version = LC_PROTO_VERSION,
	    .pid = (uint32_t)getpid(),
	    .arena_bytes = c->arena_bytes,
	};

	memcpy(h.tenant, c->tenant, sizeof(h.tenant));
	return lc_uds_send(sock, &h, sizeof(h), NULL, 0) ? LUNAR_ERR_PROXY_UNAVAILABLE : 0;
}

/* Receive the welcome; on 0 fds[0] is the memfd and fds[1] the eventfd. */
static int welcome_recv(const struct lunar_client *c, int sock, struct lc_welcome *w, int fds[2])
{
	int n = lc_uds_recv(sock, w, sizeof(*w), fds, 2, (int)c->timeout_ms), rc;

	if (n < 0) {
		LC_WARN(SHM_LOG, "handshake with %s: %s", c->path, strerror(-n));
		return LUNAR_ERR_PROXY_UNAVAILABLE;
	}
	if (w->magic != LC_SHM_MAGIC || w->code > 0 ||
	    (w->code == 0 && (n != 2 || w->version != LC_PROTO_VERSION))) {
		LC_ERROR(SHM_LOG, "handshake with %s: bad welcome", c->path);
		rc = LUNAR_ERR_PROTOCOL;
		goto err_close;
	}
	if (w->code < 0) {
		LC_WARN(SHM_LOG, "proxy %s refused: %s", c->path, lunar_strerror(w->code));
		rc = w->code;
		goto err_close;
	}
	return 0;
err_close:
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return rc;
}

/*
 * The eventfd is written by every call that finds the proxy asleep: a
 * descriptor that is not a non-blocking anonymous file (an eventfd is one;
 * a pipe or a socket is not) could block that write for good.
 */
static int evfd_check(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	struct stat st;

	if (fl < 0 || !(fl & O_NONBLOCK) || fstat(fd, &st) || (st.st_mode & S_IFMT)) {
		LC_ERROR(SHM_LOG, "handshake: the proxy's wake-up descriptor is no eventfd");
		return LUNAR_ERR_PROTOCOL;
	}
	return 0;
}

/* The socket's permissions are the proxy's first access check. */
static int connect_code(int err)
{
	switch (err) {
	case -ENAMETOOLONG: return LUNAR_ERR_INVALID_PARAMS;
	case -EACCES:
	case -EPERM: return LUNAR_ERR_UNAUTHORIZED;
	}
	return LUNAR_ERR_PROXY_UNAVAILABLE;
}

int shm_conn_open(struct lunar_client *c, struct shm_conn **out)
{
	struct lc_welcome w;
	struct shm_conn *cn;
	int fds[2], rc;

	cn = conn_alloc();
	if (!cn)
		return LUNAR_ERR_INTERNAL;
	cn->timeout_ms = c->timeout_ms;
	rc = shm_fork_socket(cn);
	if (!rc)
		rc = lc_uds_connect_fd(cn->sock, c->path, c->timeout_ms);
	if (rc) {
		LC_DEBUG(SHM_LOG, "connect %s: %s", c->path, strerror(-rc));
		rc = connect_code(rc);
		goto err_free;
	}
	rc = hello_send(c, cn->sock);
	if (!rc)
		rc = welcome_recv(c, cn->sock, &w, fds);
	if (rc)
		goto err_free;
	cn->evfd = fds[1];
	cn->seg_crc = (w.flags & LC_WELCOME_SEG_CRC) != 0;
	cn->tells_landed = (w.flags & LC_WELCOME_LANDED) != 0;
	rc = evfd_check(cn->evfd);
	if (!rc)
		rc = region_map(cn, fds[0], &w);
	close(fds[0]);
	if (!rc)
		rc = conn_init_local(cn);
	if (rc)
		goto err_free;
	LC_DEBUG(SHM_LOG, "session %llu: %llu bytes, %u slots, arena %llu",
		 (unsigned long long)w.client_id, (unsigned long long)cn->size, cn->slot_count,
		 (unsigned long long)cn->arena_size);
	cn->older = c->conns;
	c->conns = cn;
	*out = cn;
	return 0;
err_free:
	conn_release(cn);
	conn_free(cn);
	return rc;
}

void shm_conn_get(struct shm_conn *cn)
{
	lc_fetch_add(&cn->refs, 1);
}

/* A reference unless the last one is gone already: 1, else 0. */
static int conn_tryget(struct shm_conn *cn)
{
	int r = LC_READ_ONCE(cn->refs);

	while (r > 0)
		if (lc_cas(&cn->refs, &r, r + 1))
			return 1;
	return 0;
}

void shm_conn_put(struct shm_conn *cn)
{
	if (cn && lc_fetch_add(&cn->refs, -1) == 1) {
		conn_release(cn);
		lc_store_release(&cn->released, 1);
	}
}

/* In a forked child: other threads of the parent may have held the
 * sessions' locks and condition variables at the fork, so they are left
 * alone (destroying a condition variable waits for its waiters). */
void shm_conns_forget(struct lunar_client *c)
{
	while (c->conns) {
		struct shm_conn *cn = c->conns;

		c->conns = cn->older;
		/* One the parent had begun to release (unlisted) may be half
		 * unmapped in this copy: it is left, this process's copy leaks. */
		if (cn->open_gen)
			conn_unmap(cn);
		free(cn);
	}
}

void shm_conns_free(struct lunar_client *c)
{
	while (c->conns) {
		struct shm_conn *cn = c->conns;

		c->conns = cn->older;
		conn_free(cn);
	}
}

int shm_conn_is_broken(struct shm_conn *cn)
{
	return lc_load_acquire(&cn->broken);
}

void shm_conn_break(struct shm_conn *cn, const char *why)
{
	if (lc_xchg(&cn->broken, 1))
		return;
	LC_WARN(SHM_LOG, "proxy session lost: %s", why);
	pthread_mutex_lock(&cn->lock);
	pthread_cond_broadcast(&cn->cond);
	pthread_mutex_unlock(&cn->lock);
	/* Sleepers on completion words recheck broken when woken. */
	for (uint32_t i = 0; i < cn->slot_count; i++)
		lc_futex_wake(&cn->slots[i].state, INT_MAX);
}

void shm_conn_fence(struct shm_conn *cn)
{
	uint64_t end = lc_now_ms() + (lc_load_acquire(&cn->fence_failed) ? 0 : cn->timeout_ms);
	/* POLLHUP comes once both halves are shut: ours now, the proxy's
	 * when it closes the socket with the session's last reference. */
	struct pollfd p = {cn->sock, 0, 0};

	shutdown(cn->sock, SHUT_WR);
	for (;;) {
		uint64_t now = lc_now_ms();
		int n = poll(&p, 1, now < end ? (int)(end - now) : 0);

		if (n > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)))
			return;
		if (n < 0 && errno != EINTR)
			break;
		if (now >= end)
			break;
	}
	if (!lc_xchg(&cn->fence_failed, 1))
		LC_ERROR(SHM_LOG,
			 "the proxy did not finish this session's requests in %u ms: "
			 "it may still touch registered memory they named",
			 cn->timeout_ms);
}

int shm_conn_hung_up(struct shm_conn *cn)
{
	struct pollfd p = {cn->sock, POLLIN | POLLRDHUP, 0};
	char b;

	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
		return 1;
	/* After the welcome the proxy sends only registration replies, which
	 * their reader takes under the table lock; readable with nothing to
	 * peek means EOF. */
	return recv(cn->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* c's current session with a reference, if it is up. Any thread. */
static struct shm_conn *current_get(struct lunar_client *c)
{
	struct shm_conn *cn;
	int ok;

	lc_fetch_add(&c->readers, 1u);
	lc_smp_mb(); /* pairs with the fence in conns_reclaim */
	cn = lc_load_acquire(&c->conn);
	ok = cn && !shm_conn_is_broken(cn) && conn_tryget(cn);
	lc_fetch_add(&c->readers, (uint32_t)-1);
	return ok ? cn : NULL;
}

/*
 * Free the structs of replaced sessions that nobody can reach any more:
 * released (no reference left, and the last one done releasing), and no
 * reader that may have loaded c->conn before it was replaced. A reader not counted yet loads the
 * new c->conn (a fence on each side); while one is counted, they wait for the next reconnect.
 * c->lock held, after c->conn was replaced.
 */
static void conns_reclaim(struct lunar_client *c)
{
	struct shm_conn **pp = &c->conns;

	lc_smp_mb(); /* pairs with the fence in current_get */
	if (lc_load_acquire(&c->readers))
		return;
	while (*pp) {
		struct shm_conn *cn = *pp;

		if (cn != c->conn && lc_load_acquire(&cn->released)) {
			*pp = cn->older;
			conn_free(cn);
		} else {
			pp = &cn->older;
		}
	}
}

#if defined(__SANITIZE_THREAD__)
/* gcc 12's ThreadSanitizer does not intercept pthread_mutex_clocklock, and
 * would then take the mutex for never locked: under it, the same wait on
 * the wall clock, which it does intercept. */
static int mutex_lock_until(pthread_mutex_t *m, uint64_t deadline_ns)
{
	uint64_t now = lc_now_ns(), left = deadline_ns > now ? deadline_ns - now : 0;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	left += (uint64_t)ts.tv_nsec;
	ts.tv_sec += (time_t)(left / 1000000000ull);
	ts.tv_nsec = (long)(left % 1000000000ull);
	return pthread_mutex_timedlock(m, &ts);
}
#else
static int mutex_lock_until(pthread_mutex_t *m, uint64_t deadline_ns)
{
	struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
			      (long)(deadline_ns % 1000000000ull)};

	return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
}
#endif

/* c->lock, waited for until deadline_ns at most: a reconnect holds it for
 * up to the timeout, and a caller queued behind it must not wait past its
 * own. 0, or PROXY_UNAVAILABLE at the deadline. */
static int client_lock(struct lunar_client *c, uint64_t deadline_ns)
{
	int rc = mutex_lock_until(&c->lock, deadline_ns);

	LC_ASSERT(rc == 0 || rc == ETIMEDOUT);
	return rc ? LUNAR_ERR_PROXY_UNAVAILABLE : 0;
}

/* Replace c's broken or missing session, registered memory with it; the
 * attempt's code is kept for the threads that waited for it. On 0 *out is
 * the new session (the handle's reference). c->lock held. */
static int client_reconnect(struct lunar_client *c, struct shm_conn **out)
{
	struct shm_conn *cn = c->conn;
	int rc;

	lc_store_release(&c->conn, (struct shm_conn *)NULL);
	shm_conn_put(cn);
	rc = shm_conn_open(c, &cn);
	/* Registered memory follows the session before any request can see
	 * it; with no session it is released from the old. */
	shm_regs_rebind(c, rc ? NULL : cn);
	if (!rc) {
		lc_store_release(&c->conn, cn);
		*out = cn;
	}
	conns_reclaim(c);
	c->attempt_rc = rc;
	LC_WRITE_ONCE(c->attempts, c->attempts + 1);
	return rc;
}

int shm_client_acquire(struct lunar_client *c, uint64_t deadline_ns, struct shm_conn **out)
{
	struct shm_conn *cn = current_get(c);
	uint32_t seen;
	int rc;

	if (cn) {
		*out = cn;
		return 0;
	}
	/* Read before waiting: an attempt that ends after this was made for
	 * this call too. */
	seen = LC_READ_ONCE(c->attempts);
	rc = client_lock(c, deadline_ns);
	if (rc)
		return rc;
	cn = c->conn;
	if (!cn && c->attempts != seen)
		rc = c->attempt_rc; /* one failed while we waited: not one more */
	else if (!cn || shm_conn_is_broken(cn))
		rc = client_reconnect(c, &cn);
	if (!rc) {
		shm_conn_get(cn);
		*out = cn;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}
