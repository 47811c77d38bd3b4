/*
 * rdma_fake.c - the fake RDMA device layer (rdma_fake.h).
 */
#include "rdma_fake.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/rdma_int.h"

struct rdma_fake rdma_fake;

#define MEM_RKEY 0x77u	     /* every client range's MR */
#define WIN_KEY	 0x80000000u /* a window's rkey; no MR key of the fake has this bit */

/* A window: what its current rkey opens, to requests on which QP. */
struct fake_win {
	struct ibv_mw mw; /* first: q->mw[i] points here */
	struct fake_win *next;
	uint64_t addr, len;
	unsigned access;
	int bound;
	int qp; /* the QP index it was bound on: a type 2 window serves that one only */
};
static pthread_mutex_t win_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_win *wins;
static uint32_t win_ids;

static struct fake_win *win_of(struct ibv_mw *mw)
{
	return (struct fake_win *)((char *)mw - offsetof(struct fake_win, mw));
}

/* Whether a request with rkey, coming in on QP index qp, may reach
 * [addr, addr + len) for write (the peer writes) or read; MR keys count in
 * mr_key_posts. */
static int win_allows(uint32_t rkey, int qp, uint64_t addr, uint64_t len, int write)
{
	unsigned need = write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
	int ok = 0;

	if (!(rkey & WIN_KEY)) {
		if (rkey == MEM_RKEY)
			atomic_fetch_add(&rdma_fake.mr_key_posts, 1);
		return 1;
	}
	pthread_mutex_lock(&win_lock);
	for (struct fake_win *w = wins; w; w = w->next)
		if (w->mw.rkey == rkey && w->bound && w->qp == qp && (w->access & need) &&
		    addr >= w->addr && addr - w->addr <= w->len && len <= w->len - (addr - w->addr))
			ok = 1;
	pthread_mutex_unlock(&win_lock);
	if (!ok)
		atomic_fetch_add(&rdma_fake.denied, 1);
	return ok;
}

/* Bind (len > 0) on QP index qp or unbind w; a new rkey at each bind. */
static void win_bind(struct fake_win *w, int qp, uint64_t addr, uint64_t len, unsigned access)
{
	pthread_mutex_lock(&win_lock);
	if (len) {
		w->mw.rkey = (w->mw.rkey & ~0xffu) | ((w->mw.rkey + 1) & 0xffu);
		atomic_fetch_add(&rdma_fake.binds, 1);
	}
	if (w->bound != (len != 0))
		atomic_fetch_add(&rdma_fake.bound, len ? 1 : -1);
	w->addr = addr;
	w->len = len;
	w->access = access;
	w->bound = len != 0;
	w->qp = qp;
	pthread_mutex_unlock(&win_lock);
}

static void wins_free(struct eng_rdma_qps *q)
{
	for (int i = 0; i < ENG_RDMA_SGE_MAX && q->mw[i]; i++) {
		struct fake_win *w = win_of(q->mw[i]), **pp;

		win_bind(w, -1, 0, 0, 0);
		pthread_mutex_lock(&win_lock);
		for (pp = &wins; *pp != w; pp = &(*pp)->next)
			;
		*pp = w->next;
		pthread_mutex_unlock(&win_lock);
		free(w);
		q->mw[i] = NULL;
	}
}

void rdma_fake_reset(int on)
{
	memset(&rdma_fake, 0, sizeof(rdma_fake));
	rdma_fake.on = on;
}

int rdma_fake_wait_segment(const struct eng_engine *e)
{
	struct timespec ms = {0, 1000000};

	for (int i = 0; i < 10000 && eng_rdma_seg_state(e->rdma->dev) == ENG_SEG_PENDING; i++)
		nanosleep(&ms, NULL);
	return eng_rdma_seg_state(e->rdma->dev) == ENG_SEG_READY;
}

int __real_eng_rdma_dev_open(const char *spec, int keyed, struct eng_rdma_dev **out);
int __real_eng_rdma_seg_register(struct eng_rdma_dev *d, void *base, uint64_t len);
void __real_eng_rdma_dev_put(struct eng_rdma_dev *d);
int __real_eng_rdma_mem_keys(struct eng_rdma_dev *d, const void *p, uint64_t len, uint32_t *lkey,
			     uint32_t *rkey);
int __real_eng_rdma_qps_create(struct eng_rdma_dev *d, int nqp, int remote,
			       struct eng_rdma_qps **out, struct eng_rdma_hs *mine);
int __real_eng_rdma_qps_connect(struct eng_rdma_qps *q, const struct eng_rdma_hs *mine,
				const struct eng_rdma_hs *peer);
void __real_eng_rdma_qps_destroy(struct eng_rdma_qps *q);
int __real_eng_rdma_qps_post(struct eng_rdma_qps *q, struct eng_rdma_wait *w, int qp, int write,
			     void *local, uint64_t len, uint32_t lkey, uint64_t raddr,
			     uint32_t rkey, uint64_t deadline_ns);
int __real_eng_rdma_qps_wait(struct eng_rdma_qps *q, struct eng_rdma_wait *w, uint64_t deadline_ns);
void __real_eng_rdma_qps_fence(struct eng_rdma_qps *q);

int __wrap_eng_rdma_dev_open(const char *spec, int keyed, struct eng_rdma_dev **out);
int __wrap_eng_rdma_seg_register(struct eng_rdma_dev *d, void *base, uint64_t len);
void __wrap_eng_rdma_dev_put(struct eng_rdma_dev *d);
int __wrap_eng_rdma_mem_keys(struct eng_rdma_dev *d, const void *p, uint64_t len, uint32_t *lkey,
			     uint32_t *rkey);
int __wrap_eng_rdma_qps_create(struct eng_rdma_dev *d, int nqp, int remote,
			       struct eng_rdma_qps **out, struct eng_rdma_hs *mine);
int __wrap_eng_rdma_qps_connect(struct eng_rdma_qps *q, const struct eng_rdma_hs *mine,
				const struct eng_rdma_hs *peer);
void __wrap_eng_rdma_qps_destroy(struct eng_rdma_qps *q);
int __wrap_eng_rdma_qps_post(struct eng_rdma_qps *q, struct eng_rdma_wait *w, int qp, int write,
			     void *local, uint64_t len, uint32_t lkey, uint64_t raddr,
			     uint32_t rkey, uint64_t deadline_ns);
int __wrap_eng_rdma_qps_wait(struct eng_rdma_qps *q, struct eng_rdma_wait *w, uint64_t deadline_ns);
void __wrap_eng_rdma_qps_fence(struct eng_rdma_qps *q);
int __real_eng_rdma_qps_open(struct eng_rdma_qps *q, struct eng_rdma_xf *x,
			     struct ibv_mr *const mr[], uint64_t deadline_ns);
int __real_eng_rdma_qps_close(struct eng_rdma_qps *q, uint64_t deadline_ns);
int __wrap_eng_rdma_qps_open(struct eng_rdma_qps *q, struct eng_rdma_xf *x,
			     struct ibv_mr *const mr[], uint64_t deadline_ns);
struct ibv_mr *__real_eng_rdma_mem_mr(struct eng_rdma_dev *d, const void *p, uint64_t len);
struct ibv_mr *__wrap_eng_rdma_mem_mr(struct eng_rdma_dev *d, const void *p, uint64_t len);
int __wrap_eng_rdma_qps_close(struct eng_rdma_qps *q, uint64_t deadline_ns);

int __wrap_eng_rdma_dev_open(const char *spec, int keyed, struct eng_rdma_dev **out)
{
	struct eng_rdma_dev *d;

	if (!rdma_fake.on)
		return __real_eng_rdma_dev_open(spec, keyed, out);
	if (++rdma_fake.opens == rdma_fake.nodev_at)
		return -ENOENT;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->keyed = keyed;
	d->windows = keyed && !rdma_fake.no_windows;
	d->mtu = 3;
	d->port = 1;
	d->gid[15] = 1;
	strcpy(d->name, "fake0:1");
	atomic_init(&d->refs, 1);
	atomic_init(&d->seg_state, ENG_SEG_PENDING);
	*out = d;
	return 0;
}

/* Registration takes register_ms, then the segment is published, or with
 * register_rc set fails. */
int __wrap_eng_rdma_seg_register(struct eng_rdma_dev *d, void *base, uint64_t len)
{
	struct timespec ts = {rdma_fake.register_ms / 1000,
			      (long)(rdma_fake.register_ms % 1000) * 1000000};
	int rc = rdma_fake.register_rc; /* read before the outcome is published */

	if (!rdma_fake.on)
		return __real_eng_rdma_seg_register(d, base, len);
	nanosleep(&ts, NULL);
	d->seg.mr = rc ? NULL : calloc(1, sizeof(*d->seg.mr));
	if (!d->seg.mr) {
		eng_rdma_seg_fail(d);
		return rc ? rc : -ENOMEM;
	}
	d->seg.mr->rkey = 0x42;
	d->seg.base = base;
	d->seg.len = len;
	d->seg.lkey = 0x41;
	d->seg.rkey = 0x42;
	d->seg.remote = !d->keyed;
	atomic_store_explicit(&d->seg_state, ENG_SEG_READY, memory_order_release);
	return 0;
}

void __wrap_eng_rdma_dev_put(struct eng_rdma_dev *d)
{
	if (!rdma_fake.on)
		return __real_eng_rdma_dev_put(d);
	free(d->seg.mr);
	free(d);
}

int __wrap_eng_rdma_mem_keys(struct eng_rdma_dev *d, const void *p, uint64_t len, uint32_t *lkey,
			     uint32_t *rkey)
{
	if (!rdma_fake.on)
		return __real_eng_rdma_mem_keys(d, p, len, lkey, rkey);
	atomic_fetch_add(&rdma_fake.key_lookups, 1);
	if (rdma_fake.unregistered)
		return -ENOENT;
	*lkey = 1;
	*rkey = MEM_RKEY;
	return 0;
}

/* Every range is registered, in one MR, unless unregistered. */
struct ibv_mr *__wrap_eng_rdma_mem_mr(struct eng_rdma_dev *d, const void *p, uint64_t len)
{
	static struct ibv_mr mr = {.lkey = 1, .rkey = MEM_RKEY};

	if (!rdma_fake.on)
		return __real_eng_rdma_mem_mr(d, p, len);
	return rdma_fake.unregistered ? NULL : &mr;
}

int __wrap_eng_rdma_qps_create(struct eng_rdma_dev *d, int nqp, int remote,
			       struct eng_rdma_qps **out, struct eng_rdma_hs *mine)
{
	if (!rdma_fake.on)
		return __real_eng_rdma_qps_create(d, nqp, remote, out, mine);
	atomic_fetch_add(&rdma_fake.creates, 1);
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	(*out)->nqp = nqp;
	(*out)->dev = d;
	memset(mine, 0, sizeof(*mine));
	mine->nqp = (uint16_t)nqp;
	mine->mtu = d->mtu;
	mine->port = d->port;
	memcpy(mine->gid, d->gid, 16);
	for (int i = 0; i < nqp; i++) {
		mine->qpn[i] = 100 + (uint32_t)i + (remote ? 50u : 0u);
		mine->psn[i] = (uint32_t)i;
	}
	for (int i = 0; remote && d->windows && i < ENG_RDMA_SGE_MAX; i++) {
		struct fake_win *w = calloc(1, sizeof(*w));

		if (!w)
			abort();
		pthread_mutex_lock(&win_lock);
		w->mw.rkey = WIN_KEY | (++win_ids << 8);
		w->next = wins;
		wins = w;
		pthread_mutex_unlock(&win_lock);
		(*out)->mw[i] = &w->mw;
	}
	return 0;
}

int __wrap_eng_rdma_qps_connect(struct eng_rdma_qps *q, const struct eng_rdma_hs *mine,
				const struct eng_rdma_hs *peer)
{
	if (!rdma_fake.on)
		return __real_eng_rdma_qps_connect(q, mine, peer);
	atomic_fetch_add(&rdma_fake.connects, 1);
	if (peer->length) { /* the client's side: the owner's answer */
		atomic_store(&rdma_fake.owner_addr, peer->addr);
		atomic_store(&rdma_fake.owner_rkey, peer->rkey);
	}
	return rdma_fake.connect_rc;
}

void __wrap_eng_rdma_qps_destroy(struct eng_rdma_qps *q)
{
	if (!rdma_fake.on)
		return __real_eng_rdma_qps_destroy(q);
	if (q)
		wins_free(q);
	free(q);
}

/* The "NIC": READ brings raddr's bytes to local, WRITE takes them there. */
int __wrap_eng_rdma_qps_post(struct eng_rdma_qps *q, struct eng_rdma_wait *w, int qp, int write,
			     void *local, uint64_t len, uint32_t lkey, uint64_t raddr,
			     uint32_t rkey, uint64_t deadline_ns)
{
	void *remote = (void *)(uintptr_t)raddr;
	unsigned char *to = write ? remote : local;
	int running;

	if (!rdma_fake.on)
		return __real_eng_rdma_qps_post(q, w, qp, write, local, len, lkey, raddr, rkey,
						deadline_ns);
	if (atomic_load(&q->broken))
		return -EIO;
	if (rdma_fake.post_rc)
		return rdma_fake.post_rc;
	if (rdma_fake.overreach)
		len++;
	/* Our side's write lands in the remote memory: the peer's access. */
	if (!win_allows(rkey, qp, raddr, len, write))
		return -EIO;
	running = atomic_fetch_add(&rdma_fake.running, 1) + 1;
	for (int most = atomic_load(&rdma_fake.most);
	     running > most && !atomic_compare_exchange_weak(&rdma_fake.most, &most, running);)
		;
	if (rdma_fake.post_ms)
		nanosleep(&(struct timespec){rdma_fake.post_ms / 1000,
					     rdma_fake.post_ms % 1000 * 1000000l},
			  NULL);
	atomic_fetch_sub(&rdma_fake.running, 1);
	memcpy(to, write ? local : remote, len);
	if (rdma_fake.corrupt && len)
		to[0] ^= 1;
	atomic_fetch_add(&rdma_fake.posts, 1);
	atomic_fetch_add(&rdma_fake.moved, len);
	return 0;
}

int __wrap_eng_rdma_qps_wait(struct eng_rdma_qps *q, struct eng_rdma_wait *w, uint64_t deadline_ns)
{
	struct pollfd lifeline = {.fd = q->watch_fd, .events = POLLRDHUP};

	if (!rdma_fake.on)
		return __real_eng_rdma_qps_wait(q, w, deadline_ns);
	/* As the real one: a hang-up on the watched socket breaks the set. */
	if (q->watch_fd >= 0 && poll(&lifeline, 1, 0) > 0)
		atomic_store(&q->broken, 1);
	return atomic_load(&w->failed) || atomic_load(&q->broken) ? -EIO : 0;
}

void __wrap_eng_rdma_qps_fence(struct eng_rdma_qps *q)
{
	if (!rdma_fake.on)
		return __real_eng_rdma_qps_fence(q);
	atomic_store(&q->broken, 1);
	atomic_fetch_add(&rdma_fake.fences, 1);
}

int __wrap_eng_rdma_qps_open(struct eng_rdma_qps *q, struct eng_rdma_xf *x,
			     struct ibv_mr *const mr[], uint64_t deadline_ns)
{
	unsigned access =
	    x->cap_op == ENG_OP_READ ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;

	if (!rdma_fake.on)
		return __real_eng_rdma_qps_open(q, x, mr, deadline_ns);
	q->nbound = 0;
	for (unsigned i = 0; i < x->nsge; i++) {
		if (atomic_load(&q->broken) || !q->mw[i] || !mr[i])
			return -EIO;
		q->nbound++;
		win_bind(win_of(q->mw[i]), eng_rdma_piece_qp(q, i), x->sge[i].addr, x->sge[i].len,
			 access);
		x->sge[i].rkey = q->mw[i]->rkey;
	}
	return 0;
}

int __wrap_eng_rdma_qps_close(struct eng_rdma_qps *q, uint64_t deadline_ns)
{
	unsigned n = q->nbound;

	if (!rdma_fake.on)
		return __real_eng_rdma_qps_close(q, deadline_ns);
	q->nbound = 0;
	if (atomic_load(&q->broken) || rdma_fake.close_rc) {
		atomic_store(&q->broken, 1); /* as the real one does when it cannot unbind */
		wins_free(q);
		return rdma_fake.close_rc ? rdma_fake.close_rc : -EIO;
	}
	for (unsigned i = 0; i < n && q->mw[i]; i++)
		win_bind(win_of(q->mw[i]), -1, 0, 0, 0);
	return 0;
}
