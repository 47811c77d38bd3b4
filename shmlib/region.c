/*
 * region.c - memory the proxy maps from the application: the table of
 * registered ranges (lunar_register's, and lunar_alloc's chunks), the ADD and
 * DEL round trips on the session socket, and registering every range again
 * with a new session after the proxy restarts. All traffic on the socket
 * happens under the table's write lock, so one request at a time has its
 * reply outstanding, as the protocol wants.
 */
#include "shm_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "uds.h"

/* Sessions that break just before a registration are replaced this many
 * times before it gives up. */
#define SHM_REG_RETRIES 3

int shm_regs_init(struct lunar_client *c)
{
	pthread_rwlockattr_t a;
	int rc;

	/* Writers first: a steady stream of requests must not starve
	 * lunar_register or a reconnect. No thread takes the read lock twice,
	 * which this kind of lock requires. */
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	rc = pthread_rwlock_init(&c->regs_lock, &a);
	pthread_rwlockattr_destroy(&a);
	return rc ? LUNAR_ERR_INTERNAL : 0;
}

static void reg_unbind(struct shm_region *r)
{
	shm_conn_put(r->conn);
	r->conn = NULL;
	r->id = 0;
}

void shm_regs_fini(struct lunar_client *c)
{
	/* The proxy drops a session's regions with the session. */
	for (uint32_t i = 0; i < c->nregs; i++) {
		reg_unbind(&c->regs[i]);
		close(c->regs[i].fd);
		free(c->regs[i].pending);
	}
	c->nregs = 0;
	pthread_rwlock_destroy(&c->regs_lock);
}

void shm_regs_rdlock(struct lunar_client *c)
{
	pthread_rwlock_rdlock(&c->regs_lock);
}

void shm_regs_unlock(struct lunar_client *c)
{
	pthread_rwlock_unlock(&c->regs_lock);
}

/*
 * One request and its reply; regs_lock held for writing. A reply that does
 * not come in time or does not match breaks the session: a late one would
 * be taken for the answer to the next request.
 */
static int reg_call(struct lunar_client *c, struct shm_conn *cn, struct lc_reg_req *q, int fd,
		    uint32_t *region)
{
	struct lc_reg_rep p;
	int nofd[1], n;

	if (shm_conn_is_broken(cn))
		return LUNAR_ERR_PROXY_UNAVAILABLE;
	q->magic = LC_REG_MAGIC;
	q->cookie = ++c->reg_cookie;
	n = lc_uds_send(cn->sock, q, sizeof(*q), &fd, fd >= 0);
	if (!n)
		n = lc_uds_recv(cn->sock, &p, sizeof(p), nofd, 0, (int)c->timeout_ms);
	if (n < 0) {
		LC_WARN(SHM_LOG, "registration request: %s", strerror(-n));
		shm_conn_break(cn, "no registration reply");
		return LUNAR_ERR_PROXY_UNAVAILABLE;
	}
	if (p.magic != LC_REG_MAGIC || p.cookie != q->cookie || p.code > 0 ||
	    (!p.code && q->op == LC_REG_ADD && (!p.region || p.region > LC_MAX_REGIONS))) {
		shm_conn_break(cn, "bad registration reply");
		return LUNAR_ERR_PROTOCOL;
	}
	if (!p.code && region)
		*region = p.region;
	return p.code;
}

/* Share r with session cn; regs_lock held for writing. */
static int reg_add(struct lunar_client *c, struct shm_conn *cn, struct shm_region *r)
{
	struct lc_reg_req q = {.op = LC_REG_ADD, .offset = r->file_off, .length = r->span_len};
	uint32_t id;
	int rc = reg_call(c, cn, &q, r->fd, &id);

	if (rc) {
		LC_DEBUG(SHM_LOG, "register %p+%zu: %s", (void *)r->base, r->len,
			 lunar_strerror(rc));
		return rc;
	}
	shm_conn_get(cn);
	r->conn = cn;
	r->id = id;
	return 0;
}

/* Stop sharing r; regs_lock held for writing. A failed DEL leaves the
 * region with the proxy until the session ends; the range is still ours. */
static void reg_del(struct lunar_client *c, struct shm_region *r)
{
	struct lc_reg_req q = {.op = LC_REG_DEL, .region = r->id};
	int rc;

	if (!r->conn)
		return;
	rc = reg_call(c, r->conn, &q, -1, NULL);
	if (rc && rc != LUNAR_ERR_PROXY_UNAVAILABLE)
		LC_WARN(SHM_LOG, "unregister region %u: %s", r->id, lunar_strerror(rc));
	reg_unbind(r);
}

static int same_file(const struct shm_region *a, const struct shm_region *b)
{
	return a->dev == b->dev && a->ino == b->ino;
}

/*
 * rg against the table (regs_lock held): 1 when it is registered already
 * (the same range at the same place of the same memfd, or a part of a
 * lunar_alloc chunk), 0 when it overlaps nothing, INVALID_PARAMS when it
 * overlaps another range (or a stale one the caller unmapped unregistered).
 */
static int regs_overlap(const struct lunar_client *c, const struct shm_region *rg)
{
	uintptr_t lo = (uintptr_t)rg->base, hi = lo + rg->len;

	for (uint32_t i = 0; i < c->nregs; i++) {
		const struct shm_region *r = &c->regs[i];
		uintptr_t rlo = (uintptr_t)r->base, rhi = rlo + r->len;

		if (hi <= rlo || rhi <= lo)
			continue;
		if (!rg->chunk && same_file(r, rg) &&
		    ((r->chunk && lo >= rlo && hi <= rhi) ||
		     (lo == rlo && hi == rhi && r->file_off == rg->file_off)))
			return 1;
		return LUNAR_ERR_INVALID_PARAMS;
	}
	return 0;
}

/* Add rg to the table, shared with cn; regs_lock held for writing. */
static int regs_insert(struct lunar_client *c, struct shm_conn *cn, const struct shm_region *rg)
{
	struct shm_region *r;
	int rc = regs_overlap(c, rg);

	if (rc)
		return rc;
	if (c->nregs == LC_MAX_REGIONS)
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	r = &c->regs[c->nregs];
	*r = *rg;
	r->conn = NULL;
	r->id = 0;
	r->pending = calloc(1, sizeof(*r->pending));
	if (!r->pending)
		return LUNAR_ERR_INTERNAL;
	rc = reg_add(c, cn, r);
	if (rc)
		free(r->pending);
	else
		c->nregs++;
	return rc;
}

int shm_regs_add(struct lunar_client *c, const struct shm_region *rg)
{
	uint64_t deadline_ns = shm_deadline(c);
	struct shm_conn *cn;
	int rc, stale;

	for (int tries = 0;; tries++) {
		rc = shm_client_acquire(c, deadline_ns, &cn);
		if (rc)
			return rc;
		pthread_rwlock_wrlock(&c->regs_lock);
		/* A session that broke before we held the lock may have been
		 * replaced already, and its replacement registered only what
		 * the table held then: take the replacement. */
		stale = shm_conn_is_broken(cn);
		rc = stale ? LUNAR_ERR_PROXY_UNAVAILABLE : regs_insert(c, cn, rg);
		pthread_rwlock_unlock(&c->regs_lock);
		shm_conn_put(cn);
		if (!stale || tries == SHM_REG_RETRIES)
			return rc;
	}
}

void shm_regs_rebind(struct lunar_client *c, struct shm_conn *cn)
{
	uint32_t n, ok = 0;

	pthread_rwlock_wrlock(&c->regs_lock);
	n = c->nregs;
	for (uint32_t i = 0; i < n; i++) {
		reg_unbind(&c->regs[i]);
		if (cn && !reg_add(c, cn, &c->regs[i]))
			ok++;
	}
	pthread_rwlock_unlock(&c->regs_lock);
	if (cn && ok < n)
		LC_WARN(SHM_LOG, "new session: %u of %u memory ranges registered, the rest staged",
			ok, n);
	else if (cn && n)
		LC_DEBUG(SHM_LOG, "new session: %u memory ranges registered again", n);
}

int shm_regs_find(const struct lunar_client *c, const struct shm_conn *cn, const void *p,
		  size_t len, uint32_t *region, uint64_t *off, uint32_t **pending)
{
	uintptr_t a = (uintptr_t)p;

	for (uint32_t i = 0; i < c->nregs; i++) {
		const struct shm_region *r = &c->regs[i];
		uintptr_t lo = (uintptr_t)r->base;

		if (r->conn != cn || a < lo || a - lo > r->len || len > r->len - (a - lo))
			continue;
		*region = r->id;
		*off = a - (uintptr_t)r->span;
		if (pending)
			*pending = r->pending;
		return 1;
	}
	return 0;
}

int lunar_register(struct lunar_client *c, void *p, size_t len)
{
	struct shm_region rg;
	int rc, cancel;

	if (!c || !p || !len || (uintptr_t)p + len < (uintptr_t)p)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = shm_call_begin(c, &cancel);
	if (rc)
		return rc;
	rc = shm_memfd_span(p, len, &rg);
	if (!rc) {
		rc = shm_regs_add(c, &rg);
		if (rc)
			close(rg.fd);
	}
	shm_call_end(cancel);
	return rc < 0 ? rc : 0;
}

/*
 * The caller's range at p, with the table write-locked (which calls in
 * flight hold read-locked, so it waits for them) and no asynchronous call
 * pending in it (such a call does not hold the table: it is waited for,
 * table unlocked, up to the handle's timeout). Returns its index; -1 when
 * p starts no range of the caller's (the table still locked); or BUSY
 * (unlocked) when the wait ran out.
 */
static int reg_hold(struct lunar_client *c, void *p)
{
	uint64_t deadline_ns = shm_deadline(c);
	struct timespec ms = {0, 1000000};

	for (;;) {
		int found = -1;

		pthread_rwlock_wrlock(&c->regs_lock);
		for (uint32_t i = 0; i < c->nregs && found < 0; i++)
			if (!c->regs[i].chunk && c->regs[i].base == p)
				found = (int)i;
		if (found < 0 || !LC_READ_ONCE(*c->regs[found].pending))
			return found;
		pthread_rwlock_unlock(&c->regs_lock);
		if (lc_now_ns() >= deadline_ns)
			return LUNAR_ERR_BUSY;
		nanosleep(&ms, NULL);
	}
}

int lunar_unregister(struct lunar_client *c, void *p)
{
	int rc = LUNAR_ERR_INVALID_PARAMS, cancel, i;

	if (!c || !p)
		return rc;
	rc = shm_call_begin(c, &cancel);
	if (rc)
		return rc;
	i = reg_hold(c, p);
	if (i >= 0) {
		struct shm_region *r = &c->regs[i];

		reg_del(c, r);
		close(r->fd);
		free(r->pending);
		*r = c->regs[--c->nregs];
		rc = 0;
	} else if (i == -1) {
		rc = LUNAR_ERR_INVALID_PARAMS;
		/* lunar_alloc memory stays shared until lunar_free. */
		for (uint32_t k = 0; k < c->nregs; k++)
			if (c->regs[k].chunk && (uint8_t *)p >= c->regs[k].base &&
			    (uint8_t *)p < c->regs[k].base + c->regs[k].len)
				rc = 0;
	} else {
		rc = i;
	}
	if (i != LUNAR_ERR_BUSY)
		pthread_rwlock_unlock(&c->regs_lock);
	shm_call_end(cancel);
	return rc;
}
