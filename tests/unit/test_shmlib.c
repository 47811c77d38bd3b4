/*
 * test_shmlib.c - liblunar against a fake proxy running in threads of this
 * test: it listens on a temp socket, hands out a sealed memfd region laid
 * out per shm_abi.h, maps the memory the client registers on the socket,
 * consumes the ring and completes requests from a small in-memory map. It
 * is a fixture, not a proxy: it trusts the client.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "futex.h"
#include "lunar.h"
#include "ring.h"
#include "shm_abi.h"
#include "shmlib/shm_int.h"
#include "uds.h"
#include "tests/unit/test_fds.h"

/* cmocka's asserts must not run in the fake's threads. */
#define FAKE_CHECK(x)                                                                              \
	do {                                                                                       \
		if (!(x)) {                                                                        \
			fprintf(stderr, "fake proxy: %s failed\n", #x);                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#define FAKE_KV_MAX   4096
#define FAKE_SESS_MAX 32
#define FAKE_ARENA    (1u << 20)

struct fake_kv {
	char *key;
	uint8_t *val;
	size_t len;
};

struct fake;

/* A registered region, as the fake mapped it. */
struct fake_reg {
	uint8_t *base;
	uint64_t len;
};

struct fake_sess {
	struct fake *f;
	pthread_t th;
	int sock, evfd;
	uint8_t *base;
	size_t size;
	struct lc_shm_hdr h;
	uint32_t id_start; /* region ids differ between sessions */
	struct fake_reg regs[LC_MAX_REGIONS + 1];
};

struct fake {
	char dir[64], path[128];
	int lfd;
	int stop; /* atomic */
	pthread_t acceptor;
	/* behaviour, set before fake_start */
	int32_t refuse;
	int bad_magic;
	int hang; /* atomic: consume requests, never complete them */
	int ring_scribble; /* 1: write the producers' old prod_head word, 2: cons_head */
	int bad_evfd;	   /* 1: a blocking pipe for the eventfd, 2: a blocking eventfd */
	uint32_t entries, slots;
	/* behaviour, under lock */
	int delay_ms;	    /* before completing each request */
	int32_t refuse_reg; /* the code for every ADD */
	int reg_silent;	    /* take registrations, never reply */
	/* what the fake saw, under lock */
	char tenant[LC_TENANT_MAX];
	uint32_t last_region; /* of the first segment of the last put or get */
	uint8_t *last_ptr;    /* where that segment began, in the fake's mappings */
	int nadd, ndel, bad_regs;
	uint32_t last_add;
	struct fake_sess *sess[FAKE_SESS_MAX];
	int nsess;
	uint32_t sess_seq; /* sessions ever, across restarts */
	/* the store, shared by all sessions and restarts */
	pthread_mutex_t lock;
	struct fake_kv kv[FAKE_KV_MAX];
	int nkv;
};

static struct fake F;

/* --- the fake's store --- */

static int kv_find(struct fake *f, const uint8_t *key, size_t len)
{
	for (int i = 0; i < f->nkv; i++)
		if (strlen(f->kv[i].key) == len && !memcmp(f->kv[i].key, key, len))
			return i;
	return -1;
}

static void kv_drop(struct fake *f, int i)
{
	free(f->kv[i].key);
	free(f->kv[i].val);
	f->kv[i] = f->kv[--f->nkv];
}

/* Where a segment's bytes are, in the fake's own mappings. */
static uint8_t *seg_ptr(const struct fake_sess *s, const struct lc_seg *sg)
{
	return sg->region ? s->regs[sg->region].base + sg->off : s->base + sg->off;
}

static void seg_seen(struct fake_sess *s, const struct lc_seg *sg)
{
	s->f->last_region = sg->region;
	s->f->last_ptr = seg_ptr(s, sg);
}

static int64_t op_put(struct fake_sess *s, const struct lc_item *it, int upsert)
{
	struct fake *f = s->f;
	const struct lc_seg *sg = (const struct lc_seg *)(s->base + it->seg_off);
	size_t len = 0, at = 0;
	uint8_t *val;
	int i;

	for (uint32_t j = 0; j < it->nseg; j++)
		len += sg[j].len;
	val = malloc(len);
	for (uint32_t j = 0; j < it->nseg; j++) {
		memcpy(val + at, seg_ptr(s, &sg[j]), sg[j].len);
		at += sg[j].len;
	}
	seg_seen(s, &sg[0]);
	i = kv_find(f, s->base + it->key_off, it->key_len);
	if (i >= 0 && !upsert) {
		free(val);
		return 0;
	}
	if (i < 0) {
		i = f->nkv++;
		f->kv[i].key = strndup((const char *)s->base + it->key_off, it->key_len);
	} else {
		free(f->kv[i].val);
	}
	f->kv[i].val = val;
	f->kv[i].len = len;
	return 0;
}

static int64_t op_get(struct fake_sess *s, const struct lc_item *it)
{
	const struct lc_seg *sg = (const struct lc_seg *)(s->base + it->seg_off);
	int i = kv_find(s->f, s->base + it->key_off, it->key_len);
	size_t cap = 0, at = 0;

	seg_seen(s, &sg[0]);
	if (i < 0)
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	for (uint32_t j = 0; j < it->nseg; j++)
		cap += sg[j].len;
	if (cap < s->f->kv[i].len)
		return LUNAR_ERR_BUFFER_OVERFLOW;
	for (uint32_t j = 0; j < it->nseg && at < s->f->kv[i].len; j++) {
		size_t n = sg[j].len < s->f->kv[i].len - at ? sg[j].len : s->f->kv[i].len - at;

		memcpy(seg_ptr(s, &sg[j]), s->f->kv[i].val + at, n);
		at += n;
	}
	return (int64_t)at;
}

static int64_t op_item(struct fake_sess *s, uint16_t op, const struct lc_item *it)
{
	const uint8_t *key = s->base + it->key_off;
	int i = kv_find(s->f, key, it->key_len);

	switch (op) {
	case LC_OP_PUT: return op_put(s, it, 0);
	case LC_OP_UPSERT: return op_put(s, it, 1);
	case LC_OP_GET: return op_get(s, it);
	case LC_OP_GET_SIZE: return i < 0 ? LUNAR_ERR_OBJECT_NOT_FOUND : (int64_t)s->f->kv[i].len;
	case LC_OP_EXISTS: return i >= 0 || (it->key_len >= 3 && !memcmp(key, "yes", 3));
	case LC_OP_REMOVE:
		if (i < 0)
			return LUNAR_ERR_OBJECT_NOT_FOUND;
		kv_drop(s->f, i);
		return 0;
	}
	return LUNAR_ERR_INVALID_PARAMS;
}

/* Regex stand-in: substring match. */
static int64_t op_remove_many(struct fake *f, const uint8_t *pat, size_t len)
{
	int64_t n = 0;

	for (int i = f->nkv - 1; i >= 0; i--) {
		if (len && !memmem(f->kv[i].key, strlen(f->kv[i].key), pat, len))
			continue;
		kv_drop(f, i);
		n++;
	}
	return n;
}

static int fake_in_arena(const struct fake_sess *s, uint64_t off, uint64_t len)
{
	return off >= s->h.arena_off && off - s->h.arena_off <= s->h.arena_size &&
	       len <= s->h.arena_size - (off - s->h.arena_off);
}

static int fake_seg_ok(const struct fake_sess *s, const struct lc_seg *sg)
{
	const struct fake_reg *r = &s->regs[sg->region];

	if (!sg->region)
		return fake_in_arena(s, sg->off, sg->len);
	return sg->region <= LC_MAX_REGIONS && r->base && sg->off <= r->len &&
	       sg->len <= r->len - sg->off;
}

/* The rules the real proxy disconnects a client for (docs/shm-abi.md). */
static void fake_validate(const struct fake_sess *s, const struct lc_sqe *e)
{
	const struct lc_item *it = (const struct lc_item *)(s->base + e->arg_off);
	int segs = e->op == LC_OP_PUT || e->op == LC_OP_UPSERT || e->op == LC_OP_GET;

	FAKE_CHECK(e->slot < s->h.slot_count && e->op > 0 && e->op < LC_OP_MAX);
	if (e->op == LC_OP_REMOVE_ALL || e->op == LC_OP_HEALTH) {
		FAKE_CHECK(!e->count && !e->arg_len);
		return;
	}
	FAKE_CHECK(fake_in_arena(s, e->arg_off, e->arg_len));
	if (e->op == LC_OP_REMOVE_REGEX) {
		FAKE_CHECK(!e->count && e->arg_len && e->arg_len <= LUNAR_KEY_MAX);
		return;
	}
	FAKE_CHECK(e->count >= 1 && e->count <= LUNAR_BATCH_MAX && e->arg_off % 8 == 0);
	FAKE_CHECK(e->arg_len == (uint64_t)e->count * sizeof(*it));
	for (uint32_t i = 0; i < e->count; i++) {
		const struct lc_seg *sg = (const struct lc_seg *)(s->base + it[i].seg_off);

		FAKE_CHECK(it[i].key_len && it[i].key_len <= LUNAR_KEY_MAX);
		FAKE_CHECK(fake_in_arena(s, it[i].key_off, it[i].key_len));
		FAKE_CHECK(segs ? it[i].nseg >= 1 && it[i].nseg <= LUNAR_IOV_MAX : !it[i].nseg);
		if (!segs)
			continue;
		FAKE_CHECK(it[i].seg_off % 8 == 0 &&
			   fake_in_arena(s, it[i].seg_off, it[i].nseg * sizeof(*sg)));
		for (uint32_t j = 0; j < it[i].nseg; j++)
			FAKE_CHECK(fake_seg_ok(s, &sg[j]));
	}
}

static int64_t fake_exec(struct fake_sess *s, const struct lc_sqe *e)
{
	struct lc_item *it = (struct lc_item *)(s->base + e->arg_off);
	int64_t r = 0;

	switch (e->op) {
	case LC_OP_HEALTH: return 0;
	case LC_OP_REMOVE_ALL: return op_remove_many(s->f, NULL, 0);
	case LC_OP_REMOVE_REGEX: return op_remove_many(s->f, s->base + e->arg_off, e->arg_len);
	case LC_OP_PREFIX_MATCH:
		while (r < e->count && kv_find(s->f, s->base + it[r].key_off, it[r].key_len) >= 0)
			r++;
		return r;
	}
	for (uint32_t i = 0; i < e->count; i++)
		it[i].result = op_item(s, e->op, &it[i]);
	return 0;
}

static void fake_complete(struct fake_sess *s, const struct lc_sqe *e)
{
	struct lc_cslot *slots = (struct lc_cslot *)(s->base + s->h.slots_off);
	struct lc_cslot *sl;
	int64_t r;

	fake_validate(s, e);
	sl = &slots[e->slot];
	pthread_mutex_lock(&s->f->lock);
	if (s->f->delay_ms)
		usleep(s->f->delay_ms * 1000);
	r = fake_exec(s, e);
	pthread_mutex_unlock(&s->f->lock);
	sl->result = r;
	sl->seq = e->seq;
	if (lc_xchg(&sl->state, (uint32_t)LC_SLOT_DONE) == LC_SLOT_WAITING)
		lc_futex_wake(&sl->state, 1);
}

/* --- the fake's sessions --- */

static int fake_drain(struct fake_sess *s, uint32_t *cons)
{
	struct lc_ring_ctl *ring = (struct lc_ring_ctl *)(s->base + s->h.ring_off);
	struct lc_sqe *sqes = (struct lc_sqe *)(s->base + s->h.sqes_off);
	int64_t n = lc_ring_consumable(ring, s->h.ring_entries, *cons);

	FAKE_CHECK(n >= 0);
	for (int64_t i = 0; i < n; i++) {
		struct lc_sqe e = sqes[(*cons + i) & (s->h.ring_entries - 1)];

		if (!lc_load_acquire(&s->f->hang))
			fake_complete(s, &e);
	}
	*cons += (uint32_t)n;
	if (s->f->ring_scribble != 2) /* else the bad index stays */
		lc_ring_release(ring, *cons);
	return n > 0;
}

/* ADD under f->lock: the checks the real proxy makes, then map it. */
static int32_t fake_reg_add(struct fake_sess *s, const struct lc_reg_req *q, int fd, uint32_t *id)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;
	uint32_t i, k;
	void *m;

	if (s->f->refuse_reg)
		return s->f->refuse_reg;
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) || q->offset % 4096 ||
	    !q->length || q->offset + q->length > (uint64_t)st.st_size) {
		s->f->bad_regs++;
		return LUNAR_ERR_INVALID_PARAMS;
	}
	for (k = 0; k < LC_MAX_REGIONS; k++) {
		i = (s->id_start + k) % LC_MAX_REGIONS + 1;
		if (!s->regs[i].base)
			break;
	}
	if (k == LC_MAX_REGIONS)
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	m = mmap(NULL, q->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)q->offset);
	FAKE_CHECK(m != MAP_FAILED);
	s->regs[i] = (struct fake_reg){m, q->length};
	*id = s->f->last_add = i;
	return 0;
}

static int32_t fake_reg_del(struct fake_sess *s, uint32_t id)
{
	if (!id || id > LC_MAX_REGIONS || !s->regs[id].base)
		return LUNAR_ERR_INVALID_PARAMS;
	munmap(s->regs[id].base, s->regs[id].len);
	s->regs[id].base = NULL;
	return 0;
}

/* One registration request; -1 when the client went away. */
static int fake_reg(struct fake_sess *s)
{
	struct lc_reg_rep p = {.magic = LC_REG_MAGIC};
	struct lc_reg_req q;
	int fd = -1, n, silent;

	n = lc_uds_recv(s->sock, &q, sizeof(q), &fd, 1, 2000);
	if (n < 0)
		return -1;
	FAKE_CHECK(q.magic == LC_REG_MAGIC);
	p.cookie = q.cookie;
	pthread_mutex_lock(&s->f->lock);
	if (q.op == LC_REG_ADD) {
		FAKE_CHECK(n == 1 && !q.region);
		s->f->nadd++;
		p.code = fake_reg_add(s, &q, fd, &p.region);
	} else {
		FAKE_CHECK(q.op == LC_REG_DEL && n == 0);
		s->f->ndel++;
		p.code = fake_reg_del(s, q.region);
	}
	silent = s->f->reg_silent;
	pthread_mutex_unlock(&s->f->lock);
	if (fd >= 0)
		close(fd);
	if (!silent)
		FAKE_CHECK(lc_uds_send(s->sock, &p, sizeof(p), NULL, 0) == 0);
	return 0;
}

static void *fake_sess_run(void *arg)
{
	struct fake_sess *s = arg;
	struct lc_ring_ctl *ring = (struct lc_ring_ctl *)(s->base + s->h.ring_off);
	uint32_t cons = 0;
	uint64_t junk;

	while (!lc_load_acquire(&s->f->stop)) {
		struct pollfd p[2] = {{s->evfd, POLLIN, 0}, {s->sock, POLLIN | POLLRDHUP, 0}};
		int busy = fake_drain(s, &cons);

		if (!busy) {
			lc_ring_set_sleeping(ring, 1);
			busy = fake_drain(s, &cons);
		}
		/* The socket is looked at even while the ring is busy. */
		if (poll(p, 2, busy ? 0 : 10) > 0) {
			if ((p[1].revents & POLLIN) ? fake_reg(s) : p[1].revents != 0)
				break; /* the client went away */
			if (p[0].revents && read(s->evfd, &junk, sizeof(junk)) < 0)
				FAKE_CHECK((errno) == (EAGAIN));
		}
		lc_ring_set_sleeping(ring, 0);
	}
	return NULL;
}

static int fake_region(struct fake_sess *s, int *memfd)
{
	struct lc_shm_hdr *h = &s->h;

	memset(h, 0, sizeof(*h));
	h->magic = s->f->bad_magic ? 0xdeadbeef : LC_SHM_MAGIC;
	h->version = LC_PROTO_VERSION;
	h->hdr_size = sizeof(*h);
	h->client_id = 7;
	h->ring_off = 4096;
	h->ring_entries = s->f->entries;
	h->sqes_off = 4096 + 256;
	h->slots_off = h->sqes_off + h->ring_entries * sizeof(struct lc_sqe);
	h->slot_count = s->f->slots;
	h->arena_off = (h->slots_off + h->slot_count * sizeof(struct lc_cslot) + 4095) & ~4095ull;
	h->arena_size = FAKE_ARENA;
	h->region_size = h->arena_off + h->arena_size;
	h->max_batch = LUNAR_BATCH_MAX;
	h->max_segs = LUNAR_IOV_MAX;
	h->key_max = LUNAR_KEY_MAX;
	s->size = h->region_size;
	*memfd = memfd_create("lunar-fake", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	FAKE_CHECK(*memfd >= 0);
	FAKE_CHECK((ftruncate(*memfd, (off_t)s->size)) == (0));
	FAKE_CHECK((fcntl(*memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) == (0));
	s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, *memfd, 0);
	FAKE_CHECK(s->base != MAP_FAILED);
	memcpy(s->base, h, sizeof(*h));
	lc_ring_init((struct lc_ring_ctl *)(s->base + h->ring_off));
	if (s->f->ring_scribble == 1)
		((struct lc_ring_ctl *)(s->base + h->ring_off))->reserved0 = 1;
	else if (s->f->ring_scribble == 2)
		((struct lc_ring_ctl *)(s->base + h->ring_off))->cons_head = 1000;
	return 0;
}

static void fake_handshake(struct fake *f, int sock)
{
	struct lc_welcome w = {.magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION};
	struct lc_hello hello;
	struct fake_sess *s;
	int fds[2];

	FAKE_CHECK((lc_uds_recv(sock, &hello, sizeof(hello), NULL, 0, 2000)) == (0));
	FAKE_CHECK((hello.magic) == (LC_SHM_MAGIC));
	pthread_mutex_lock(&f->lock);
	memcpy(f->tenant, hello.tenant, sizeof(f->tenant));
	pthread_mutex_unlock(&f->lock);
	if (f->refuse) {
		w.code = f->refuse;
		FAKE_CHECK((lc_uds_send(sock, &w, sizeof(w), NULL, 0)) == (0));
		close(sock);
		return;
	}
	s = calloc(1, sizeof(*s));
	s->f = f;
	s->sock = sock;
	s->id_start = f->sess_seq++ * 5 + 3;
	fake_region(s, &fds[0]);
	if (f->bad_evfd == 1) {
		int p[2];

		/* The client gets the write end; the fake polls the read end. */
		FAKE_CHECK(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
		FAKE_CHECK(fcntl(p[1], F_SETFL, 0) == 0);
		s->evfd = p[0];
		fds[1] = p[1];
	} else {
		s->evfd = fds[1] = eventfd(0, (f->bad_evfd ? 0 : EFD_NONBLOCK) | EFD_CLOEXEC);
	}
	w.client_id = s->h.client_id;
	w.region_size = s->size;
	FAKE_CHECK((lc_uds_send(sock, &w, sizeof(w), fds, 2)) == (0));
	close(fds[0]);
	if (fds[1] != s->evfd)
		close(fds[1]);
	pthread_mutex_lock(&f->lock);
	FAKE_CHECK(f->nsess < FAKE_SESS_MAX);
	f->sess[f->nsess++] = s;
	pthread_mutex_unlock(&f->lock);
	pthread_create(&s->th, NULL, fake_sess_run, s);
}

static void *fake_accept_run(void *arg)
{
	struct fake *f = arg;

	while (!lc_load_acquire(&f->stop)) {
		struct pollfd p = {f->lfd, POLLIN, 0};
		int sock;

		if (poll(&p, 1, 10) <= 0)
			continue;
		sock = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (sock >= 0)
			fake_handshake(f, sock);
	}
	return NULL;
}

static void fake_start(struct fake *f)
{
	lc_store_release(&f->stop, 0);
	f->lfd = lc_uds_listen(f->path, 0600);
	FAKE_CHECK(f->lfd >= 0);
	pthread_create(&f->acceptor, NULL, fake_accept_run, f);
}

/* Stop like a dying proxy: every client socket and the listener close; the
 * socket file stays, so connects are refused. */
static void fake_stop(struct fake *f)
{
	lc_store_release(&f->stop, 1);
	pthread_join(f->acceptor, NULL);
	for (int i = 0; i < f->nsess; i++) {
		struct fake_sess *s = f->sess[i];

		pthread_join(s->th, NULL);
		close(s->sock);
		close(s->evfd);
		munmap(s->base, s->size);
		for (int r = 1; r <= LC_MAX_REGIONS; r++)
			if (s->regs[r].base)
				munmap(s->regs[r].base, s->regs[r].len);
		free(s);
	}
	f->nsess = 0;
	close(f->lfd);
}

/* What the fake saw, read under its lock from the test's thread. */
static int fake_nsess(void)
{
	int n;

	pthread_mutex_lock(&F.lock);
	n = F.nsess;
	pthread_mutex_unlock(&F.lock);
	return n;
}

/* The byte the fake sees where the last put's value (or get's destination)
 * began, and in which region that was. */
static uint8_t fake_last_byte(void)
{
	uint8_t b;

	pthread_mutex_lock(&F.lock);
	b = *F.last_ptr;
	pthread_mutex_unlock(&F.lock);
	return b;
}

static uint32_t fake_last_region(void)
{
	uint32_t r;

	pthread_mutex_lock(&F.lock);
	r = F.last_region;
	pthread_mutex_unlock(&F.lock);
	return r;
}

/* Registration counters: ADDs, DELs, and ADDs the fake found bad. */
static void fake_regs_seen(int *nadd, int *ndel)
{
	pthread_mutex_lock(&F.lock);
	*nadd = F.nadd;
	*ndel = F.ndel;
	FAKE_CHECK(F.bad_regs == 0);
	pthread_mutex_unlock(&F.lock);
}

static void fake_set(int *field, int v)
{
	pthread_mutex_lock(&F.lock);
	*field = v;
	pthread_mutex_unlock(&F.lock);
}

static void fake_tenant(char *out)
{
	pthread_mutex_lock(&F.lock);
	memcpy(out, F.tenant, sizeof(F.tenant));
	pthread_mutex_unlock(&F.lock);
}

static int setup(void **state)
{
	static int n;

	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.lock, NULL);
	snprintf(F.dir, sizeof(F.dir), "/tmp/lunar-shmtest-XXXXXX");
	assert_non_null(mkdtemp(F.dir));
	snprintf(F.path, sizeof(F.path), "%s/proxy%d.sock", F.dir, n++);
	F.entries = 64;
	F.slots = 64;
	return 0;
}

static int teardown(void **state)
{
	op_remove_many(&F, NULL, 0);
	unlink(F.path);
	rmdir(F.dir);
	return 0;
}

static struct lunar_client *connect_fake(unsigned timeout_ms)
{
	struct lunar_opts o = {.socket_path = F.path, .timeout_ms = timeout_ms};
	struct lunar_client *c = NULL;

	assert_int_equal(lunar_connect(&o, &c), 0);
	return c;
}

static void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7);
}

/* Application memory: a memfd of len bytes mapped shared read-write,
 * sealed against shrinking when seal; *fd stays open. */
static uint8_t *memfd_map(size_t len, int seal, int *fd)
{
	uint8_t *p;

	*fd = memfd_create("app-buf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(*fd >= 0);
	assert_int_equal(ftruncate(*fd, (off_t)len), 0);
	if (seal)
		assert_int_equal(fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	assert_true(p != MAP_FAILED);
	return p;
}

/* The fake reads the last put's value where the client's memory is: a
 * change made after the put shows through its own mapping. */
static void assert_read_in_place(uint8_t *p)
{
	assert_int_not_equal(fake_last_region(), 0);
	p[0] ^= 0xff;
	assert_int_equal(fake_last_byte(), p[0]);
	p[0] ^= 0xff;
}

/* --- the tests --- */

static void test_shmlib_handshake(void **state)
{
	struct lunar_opts o = {.socket_path = F.path, .tenant = "team-a"};
	struct lunar_client *c = NULL;
	char tenant[LC_TENANT_MAX];

	fake_start(&F);
	assert_int_equal(lunar_connect(&o, &c), 0);
	fake_tenant(tenant);
	assert_string_equal(tenant, "team-a");
	assert_int_equal(lunar_health(c), 0);
	lunar_close(c);
	lunar_close(NULL);
	/* No options: $LUNAR_SOCKET, empty tenant (the proxy's default). */
	setenv("LUNAR_SOCKET", F.path, 1);
	assert_int_equal(lunar_connect(NULL, &c), 0);
	unsetenv("LUNAR_SOCKET");
	fake_tenant(tenant);
	assert_string_equal(tenant, "");
	assert_int_equal(lunar_exists(c, "yes-please"), 1);
	assert_int_equal(lunar_exists(c, "no-thanks"), 0);
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_refused(void **state)
{
	struct lunar_opts o = {.socket_path = F.path};
	struct lunar_client *c = NULL;
	char longname[LC_TENANT_MAX + 8];

	o.socket_path = "/nonexistent/lunar.sock";
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_PROXY_UNAVAILABLE);
	o.socket_path = F.path;
	F.refuse = LUNAR_ERR_TOO_MANY_CLIENTS;
	fake_start(&F);
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_TOO_MANY_CLIENTS);
	assert_null(c);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	o.tenant = longname;
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_INVALID_PARAMS);
	o.tenant = "bad tenant";
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_connect(NULL, NULL), LUNAR_ERR_INVALID_PARAMS);
	fake_stop(&F);
}

static void test_shmlib_bad_header(void **state)
{
	struct lunar_opts o = {.socket_path = F.path};
	struct lunar_client *c = NULL;

	F.bad_magic = 1;
	fake_start(&F);
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_PROTOCOL);
	fake_stop(&F);
}

/* What the proxy writes into the ring never stalls a call: the producers'
 * words are the library's own, and a consumer index out of bounds fails the
 * call at once (it used to pass; a far-behind one waited out the timeout). */
static void test_shmlib_ring_scribbled(void **state)
{
	struct lunar_client *c;

	F.ring_scribble = 1; /* with prod_head shared, the commit waited forever */
	fake_start(&F);
	c = connect_fake(1000);
	assert_int_equal(lunar_put(c, "k", "v", 1, NULL), 0);
	assert_int_equal(lunar_exists(c, "k"), 1);
	lunar_close(c);
	fake_stop(&F);
	F.ring_scribble = 2;
	fake_start(&F);
	c = connect_fake(1000);
	assert_int_equal(lunar_put(c, "k", "v", 1, NULL), LUNAR_ERR_PROTOCOL);
	lunar_close(c);
	fake_stop(&F);
}

/* A wake-up descriptor whose write could block (a pipe, a blocking
 * eventfd) is refused at the handshake. */
static void test_shmlib_bad_eventfd(void **state)
{
	struct lunar_opts o = {.socket_path = F.path, .timeout_ms = 1000};
	struct lunar_client *c = NULL;

	for (int mode = 1; mode <= 2; mode++) {
		F.bad_evfd = mode;
		fake_start(&F);
		assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_PROTOCOL);
		fake_stop(&F);
	}
}

static void test_shmlib_arguments(void **state)
{
	char big[LUNAR_KEY_MAX + 2];
	const char *keys[3] = {"k1", "bad\nkey", "k3"};
	struct iovec v[LUNAR_IOV_MAX + 1] = {{big, 1}};
	const struct iovec *iovs[3] = {v, v, v};
	int cnts[3] = {1, 1, 1}, res[3];
	struct lunar_client *c;

	fake_start(&F);
	c = connect_fake(0);
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	assert_int_equal(lunar_put(NULL, "k", "v", 1, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_exists(NULL, "k"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_put(c, NULL, "v", 1, NULL), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lunar_put(c, "", "v", 1, NULL), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lunar_put(c, "a\tb", "v", 1, NULL), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lunar_exists(c, big), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lunar_remove_by_regex(c, big, 0), LUNAR_ERR_INVALID_PARAMS);
	big[LUNAR_KEY_MAX] = 0;
	assert_int_equal(lunar_exists(c, big), 0);
	assert_int_equal(lunar_put(c, "k", "v", 0, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_put(c, "k", NULL, 1, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_putv(c, "k", v, 0, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_putv(c, "k", NULL, 1, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_putv(c, "k", v, LUNAR_IOV_MAX + 1, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_getv(c, "k", v, -1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_get_into(c, "k", big, 0), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_remove_by_regex(c, NULL, 0), LUNAR_ERR_INVALID_PARAMS);
	/* Batches: n == 0 does nothing, bad arrays fail the call, bad keys
	 * fail alone. */
	assert_int_equal(lunar_batch_exists(c, 0, NULL, NULL), 0);
	assert_int_equal(lunar_batch_exists(c, LUNAR_BATCH_MAX + 1, keys, res),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_batch_exists(c, 3, NULL, res), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_batch_put(c, 3, keys, NULL, cnts, NULL, res),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_batch_put(c, 3, keys, iovs, cnts, NULL, res), 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], LUNAR_ERR_INVALID_KEY);
	assert_int_equal(res[2], 0);
	assert_int_equal(lunar_batch_exists(c, 3, keys, res), 0);
	assert_int_equal(res[0], 1);
	assert_int_equal(res[1], LUNAR_ERR_INVALID_KEY);
	assert_int_equal(res[2], 1);
	assert_int_equal(lunar_register(NULL, big, 16), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, NULL, 16), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, big, 0), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, (void *)-4096, 8192), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_unregister(c, big), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_unregister(NULL, big), LUNAR_ERR_INVALID_PARAMS);
	assert_null(lunar_alloc(c, 0));
	assert_null(lunar_alloc(NULL, 64));
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_put_get(void **state)
{
	static uint8_t val[10000], out[12000];
	struct iovec in[3] = {{val, 1}, {val + 1, 4999}, {val + 5000, 5000}};
	struct iovec dst[4] = {
	    {out, 3000}, {out + 3000, 0}, {out + 3000, 3000}, {out + 6000, 6000}};
	const char *pk[4] = {"p0", "p1", "p2", "p3"};
	struct lunar_client *c;

	fake_start(&F);
	c = connect_fake(0);
	fill(val, sizeof(val), 1);
	assert_int_equal(lunar_putv(c, "obj", in, 3, NULL), 0);
	assert_int_equal(lunar_get_size(c, "obj"), (int64_t)sizeof(val));
	memset(out, 0xee, sizeof(out));
	assert_int_equal(lunar_getv(c, "obj", dst, 4), (int64_t)sizeof(val));
	assert_memory_equal(out, val, sizeof(val));
	assert_int_equal(out[sizeof(val)], 0xee); /* nothing past the value */
	assert_int_equal(lunar_get_into(c, "obj", out, 100), LUNAR_ERR_BUFFER_OVERFLOW);
	assert_int_equal(lunar_get_into(c, "none", out, 100), LUNAR_ERR_OBJECT_NOT_FOUND);
	/* put keeps the first value, upsert replaces it. */
	assert_int_equal(lunar_put(c, "obj", "x", 1, NULL), 0);
	assert_int_equal(lunar_get_size(c, "obj"), (int64_t)sizeof(val));
	assert_int_equal(lunar_upsert(c, "obj", "xyz", 3, NULL), 0);
	assert_int_equal(lunar_get_into(c, "obj", out, sizeof(out)), 3);
	assert_memory_equal(out, "xyz", 3);
	/* The arena's first eighth is cells for small calls (16 of 8 KiB,
	 * fewer than the 64 slots): a value larger than the rest can never be
	 * staged and bounces through lunar_alloc memory, one a little smaller
	 * is staged. */
	{
		size_t most = FAKE_ARENA - FAKE_ARENA / 8, len = most - 4096;
		uint8_t *huge = calloc(1, FAKE_ARENA + 1);

		assert_int_equal(lunar_put(c, "huge", huge, most + 1, NULL), 0);
		assert_int_equal(lunar_get_size(c, "huge"), (int64_t)(most + 1));
		assert_int_equal(lunar_remove(c, "huge", 0), 0);
		fill(huge, len, 5);
		assert_int_equal(lunar_put(c, "big", huge, len, NULL), 0);
		assert_int_equal(lunar_get_size(c, "big"), (int64_t)len);
		assert_int_equal(lunar_remove(c, "big", 0), 0);
		/* A destination larger than the arena still takes a small value. */
		assert_int_equal(lunar_get_into(c, "obj", huge, FAKE_ARENA + 1), 3);
		assert_memory_equal(huge, "xyz", 3);
		assert_int_equal(lunar_get_into(c, "none", huge, FAKE_ARENA + 1),
				 LUNAR_ERR_OBJECT_NOT_FOUND);
		free(huge);
	}
	assert_int_equal(lunar_put(c, "p0", "a", 1, NULL), 0);
	assert_int_equal(lunar_put(c, "p1", "b", 1, NULL), 0);
	assert_int_equal(lunar_put(c, "p3", "d", 1, NULL), 0);
	assert_int_equal(lunar_prefix_match(c, 4, pk), 2);
	assert_int_equal(lunar_prefix_match(c, 0, pk), 0);
	assert_int_equal(lunar_remove(c, "p0", 0), 0);
	assert_int_equal(lunar_remove(c, "p0", 1), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(lunar_remove_by_regex(c, "p", 0), 2);
	assert_int_equal(lunar_remove_all(c, 1), 1);
	assert_int_equal(lunar_exists(c, "obj"), 0);
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_batch_get(void **state)
{
	enum { N = 40 };
	static uint8_t vals[N][300], outs[N][300];
	const char *keys[N];
	char names[N][16];
	struct iovec vin[N], vout[N];
	const struct iovec *iin[N], *iout[N];
	int cnt[N], pres[N];
	int64_t gres[N];
	struct lunar_client *c;

	fake_start(&F);
	c = connect_fake(0);
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "b%d", i);
		keys[i] = names[i];
		fill(vals[i], 100 + i, (unsigned)i);
		vin[i] = (struct iovec){vals[i], 100 + (size_t)i};
		vout[i] = (struct iovec){outs[i], i == 7 ? 50 : 300};
		iin[i] = &vin[i];
		iout[i] = &vout[i];
		cnt[i] = 1;
	}
	assert_int_equal(lunar_batch_put(c, N - 1, keys, iin, cnt, NULL, pres), 0);
	assert_int_equal(lunar_batch_get_into(c, N, keys, iout, cnt, gres), 0);
	for (int i = 0; i < N - 1; i++) {
		if (i == 7) {
			assert_int_equal(gres[i], LUNAR_ERR_BUFFER_OVERFLOW);
			continue;
		}
		assert_int_equal(pres[i], 0);
		assert_int_equal(gres[i], 100 + i);
		assert_memory_equal(outs[i], vals[i], 100 + (size_t)i);
	}
	assert_int_equal(gres[N - 1], LUNAR_ERR_OBJECT_NOT_FOUND);
	/* Destinations too big to stage together: sizes first, then the get. */
	for (int i = 0; i < 3; i++) {
		vout[i] = (struct iovec){calloc(1, FAKE_ARENA / 2), FAKE_ARENA / 2};
		keys[i] = i == 1 ? "missing" : names[i];
	}
	vout[2].iov_len = 50; /* too small for b2's 102 bytes */
	assert_int_equal(lunar_batch_get_into(c, 3, keys, iout, cnt, gres), 0);
	assert_int_equal(gres[0], 100);
	assert_memory_equal(vout[0].iov_base, vals[0], 100);
	assert_int_equal(gres[1], LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(gres[2], LUNAR_ERR_BUFFER_OVERFLOW);
	for (int i = 0; i < 3; i++)
		free(vout[i].iov_base);
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_alloc(void **state)
{
	struct lunar_client *c;
	uint8_t *p, *q, *a[16], *big;
	int n = 0, nadd, ndel;

	fake_start(&F);
	c = connect_fake(0);
	p = lunar_alloc(c, 4096);
	q = lunar_alloc(c, 4096);
	assert_non_null(p);
	assert_non_null(q);
	fill(p, 4096, 9);
	assert_int_equal(lunar_put(c, "zc", p, 4096, NULL), 0);
	assert_read_in_place(p);
	assert_int_equal(lunar_get_into(c, "zc", q, 4096), 4096);
	assert_int_not_equal(fake_last_region(), 0);
	assert_memory_equal(p, q, 4096);
	lunar_free(c, p);
	lunar_free(c, q);
	lunar_free(c, &n); /* not ours: ignored */
	lunar_free(c, NULL);
	lunar_free(NULL, q);
	/* Blocks come out of one registered chunk, freed space is reused, and
	 * lunar_alloc memory is not bounded by the arena. */
	for (n = 0; n < 16; n++) {
		a[n] = lunar_alloc(c, FAKE_ARENA * 3);
		assert_non_null(a[n]);
		memset(a[n], n, FAKE_ARENA * 3);
	}
	for (n = 0; n < 16; n++)
		lunar_free(c, a[n]);
	for (n = 0; n < 16; n++)
		assert_non_null(a[n] = lunar_alloc(c, FAKE_ARENA * 3));
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 1);
	/* Larger than a chunk: a chunk of its own. */
	big = lunar_alloc(c, (64u << 20) + 1);
	assert_non_null(big);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 2);
	fill(big + (64u << 20) - 99, 100, 4);
	assert_int_equal(lunar_put(c, "big", big + (64u << 20) - 99, 100, NULL), 0);
	assert_read_in_place(big + (64u << 20) - 99);
	assert_int_equal(lunar_get_into(c, "big", a[3], 100), 100);
	assert_memory_equal(a[3], big + (64u << 20) - 99, 100);
	lunar_free(c, big);
	for (n = 0; n < 16; n++)
		lunar_free(c, a[n]);
	/* lunar_close unmaps the chunks; it unregisters nothing one by one. */
	lunar_close(c);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(ndel, 0);
	fake_stop(&F);
}

static void test_shmlib_register(void **state)
{
	enum { LEN = 64 * 1024 };
	static uint8_t out[LEN];
	uint8_t *p, *u, *view, *heap = calloc(1, LEN), *a;
	int fd, ufd, nadd, ndel, rc;
	struct lunar_client *c;

	fake_start(&F);
	c = connect_fake(0);
	p = memfd_map(LEN, 1, &fd);
	u = memfd_map(LEN, 0, &ufd);
	/* Not memfd memory, not sealed, not wholly inside the mapping, not
	 * shared or not writable: refused before the proxy hears of it. */
	assert_int_equal(lunar_register(c, heap, LEN), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, u, LEN), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, p + 4096, LEN), LUNAR_ERR_INVALID_PARAMS);
	view = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	assert_int_equal(lunar_register(c, view, LEN), LUNAR_ERR_INVALID_PARAMS);
	munmap(view, LEN);
	view = mmap(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0);
	assert_int_equal(lunar_register(c, view, LEN), LUNAR_ERR_INVALID_PARAMS);
	munmap(view, LEN);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 0);
	/* Sealed memfd memory: registered once however often asked; a range
	 * overlapping it is refused. */
	assert_int_equal(lunar_register(c, p + 100, LEN - 200), 0);
	assert_int_equal(lunar_register(c, p + 100, LEN - 200), 0);
	assert_int_equal(lunar_register(c, p, LEN), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, p + 200, 10), LUNAR_ERR_INVALID_PARAMS);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 1);
	/* Puts read it in place, gets write it in place. */
	fill(p + 100, 5000, 3);
	assert_int_equal(lunar_put(c, "reg", p + 100, 5000, NULL), 0);
	assert_read_in_place(p + 100);
	assert_int_equal(lunar_get_into(c, "reg", p + 20000, 5000), 5000);
	assert_int_not_equal(fake_last_region(), 0);
	assert_memory_equal(p + 20000, p + 100, 5000);
	/* A buffer reaching outside the range is staged. */
	assert_int_equal(lunar_put(c, "edge", p + 50, 5000, NULL), 0);
	assert_int_equal(fake_last_region(), 0);
	assert_int_equal(lunar_get_into(c, "edge", out, LEN), 5000);
	assert_memory_equal(out, p + 50, 5000);
	/* Unregistered: the proxy is told, calls stage it again. */
	assert_int_equal(lunar_unregister(c, p + 100), 0);
	assert_int_equal(lunar_unregister(c, p + 100), LUNAR_ERR_INVALID_PARAMS);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(ndel, 1);
	assert_int_equal(lunar_get_into(c, "reg", p + 30000, 5000), 5000);
	assert_int_equal(fake_last_region(), 0);
	assert_memory_equal(p + 30000, p + 100, 5000);
	/* lunar_alloc memory is registered already. */
	a = lunar_alloc(c, 4096);
	assert_non_null(a);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(lunar_register(c, a + 64, 100), 0);
	assert_int_equal(lunar_unregister(c, a + 64), 0);
	fake_regs_seen(&rc, &ndel);
	assert_int_equal(rc, nadd);
	assert_int_equal(ndel, 1);
	memcpy(a, "alloc", 5);
	assert_int_equal(lunar_put(c, "alloc", a, 5, NULL), 0);
	assert_read_in_place(a);
	/* The caller closed its descriptor: /proc/self/map_files opens the
	 * memfd when we are privileged enough, else the range is refused. */
	close(fd);
	rc = lunar_register(c, p, 8192);
	assert_true(rc == 0 || rc == LUNAR_ERR_INVALID_PARAMS);
	if (!rc) {
		assert_int_equal(lunar_put(c, "mapfile", p + 4000, 100, NULL), 0);
		assert_read_in_place(p + 4000);
	}
	/* The table holds LC_MAX_REGIONS ranges (the chunk and maybe p among
	 * them); pages of one mapping are ranges of their own. */
	view = memfd_map(4096 * (LC_MAX_REGIONS + 1), 1, &fd);
	for (int i = 0; i <= LC_MAX_REGIONS; i++)
		if ((rc = lunar_register(c, view + 4096 * i, 1)) != 0)
			break;
	assert_int_equal(rc, LUNAR_ERR_NO_AVAILABLE_HANDLE);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd - ndel, LC_MAX_REGIONS);
	lunar_close(c);
	munmap(view, 4096 * (LC_MAX_REGIONS + 1));
	close(fd);
	munmap(p, LEN);
	munmap(u, LEN);
	close(ufd);
	free(heap);
	fake_stop(&F);
}

static void test_shmlib_reg_restart(void **state)
{
	enum { LEN = 16 * 1024 };
	struct lunar_client *c;
	uint8_t *p, *a;
	uint32_t r0;
	int fd, nadd, ndel;

	fake_start(&F);
	c = connect_fake(0);
	p = memfd_map(LEN, 1, &fd);
	assert_int_equal(lunar_register(c, p, LEN), 0);
	a = lunar_alloc(c, 1000);
	assert_non_null(a);
	fill(p, 1000, 5);
	fill(a, 1000, 6);
	assert_int_equal(lunar_put(c, "r1", p, 1000, NULL), 0);
	r0 = fake_last_region();
	assert_int_not_equal(r0, 0);
	fake_stop(&F);
	assert_int_equal(lunar_health(c), 1);
	/* The proxy is back: the next call reconnects, and both ranges are
	 * registered with it (new region numbers) before the call runs. */
	fake_start(&F);
	assert_int_equal(lunar_put(c, "r2", p, 1000, NULL), 0);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 4);
	assert_int_not_equal(fake_last_region(), r0);
	assert_read_in_place(p);
	assert_int_equal(lunar_put(c, "a2", a, 1000, NULL), 0);
	assert_read_in_place(a);
	assert_int_equal(lunar_get_into(c, "r2", a, 1000), 1000);
	assert_memory_equal(a, p, 1000);
	/* A proxy that refuses them: staged, still correct. */
	fake_stop(&F);
	assert_int_equal(lunar_health(c), 1);
	F.refuse_reg = LUNAR_ERR_TENANT_QUOTA_EXCEEDED;
	fake_start(&F);
	fill(p, 1000, 7);
	assert_int_equal(lunar_put(c, "r3", p, 1000, NULL), 0);
	assert_int_equal(fake_last_region(), 0);
	assert_int_equal(lunar_get_into(c, "r3", a, 1000), 1000);
	assert_int_equal(fake_last_region(), 0);
	assert_memory_equal(a, p, 1000);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 6);
	/* The range stays in the table, unshared; a live proxy's refusal of a
	 * new registration is the caller's answer. */
	assert_int_equal(lunar_register(c, p + LEN / 2, 100), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_unregister(c, p), 0);
	assert_int_equal(lunar_register(c, p, LEN), LUNAR_ERR_TENANT_QUOTA_EXCEEDED);
	assert_null(lunar_alloc(c, (64u << 20) + 1));
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(ndel, 0); /* nothing was shared with this session */
	lunar_free(c, a);
	lunar_close(c);
	munmap(p, LEN);
	close(fd);
	fake_stop(&F);
}

static void test_shmlib_reg_timeout(void **state)
{
	struct lunar_client *c;
	uint64_t t0, dt;
	uint8_t *p;
	int fd;

	fake_start(&F);
	c = connect_fake(300);
	p = memfd_map(8192, 1, &fd);
	fake_set(&F.reg_silent, 1);
	t0 = lc_now_ms();
	assert_int_equal(lunar_register(c, p, 8192), LUNAR_ERR_PROXY_UNAVAILABLE);
	dt = lc_now_ms() - t0;
	assert_true(dt >= 250 && dt < 1500);
	/* A late reply would answer the next request: the session was
	 * dropped, and a new one serves the next call. */
	fake_set(&F.reg_silent, 0);
	assert_int_equal(lunar_register(c, p, 8192), 0);
	assert_int_equal(fake_nsess(), 2);
	memcpy(p, "hello", 5);
	assert_int_equal(lunar_put(c, "hello", p, 5, NULL), 0);
	assert_read_in_place(p);
	lunar_close(c);
	munmap(p, 8192);
	close(fd);
	fake_stop(&F);
}

struct wide_put {
	struct lunar_client *c;
	uint8_t *val;
	int rc;
};

static void *wide_put_run(void *arg)
{
	struct wide_put *w = arg;

	w->rc = lunar_put(w->c, "first", w->val, FAKE_ARENA / 4 * 3, NULL);
	return NULL;
}

static void test_shmlib_arena_full(void **state)
{
	uint8_t *val = calloc(1, FAKE_ARENA);
	struct wide_put w;
	pthread_t th;
	uint64_t t0;

	fake_start(&F);
	w = (struct wide_put){connect_fake(5000), val, -1};
	/* A slow put holds most of the arena with its staged value; the next
	 * one waits for the space, then goes through. */
	fake_set(&F.delay_ms, 300);
	pthread_create(&th, NULL, wide_put_run, &w);
	usleep(100 * 1000);
	t0 = lc_now_ms();
	assert_int_equal(lunar_put(w.c, "wide", val, FAKE_ARENA / 2, NULL), 0);
	assert_true(lc_now_ms() - t0 >= 350);
	pthread_join(th, NULL);
	assert_int_equal(w.rc, 0);
	fake_set(&F.delay_ms, 0);
	assert_int_equal(lunar_get_size(w.c, "wide"), FAKE_ARENA / 2);
	free(val);
	lunar_close(w.c);
	fake_stop(&F);
}

struct worker {
	struct lunar_client *c;
	int id;
	int errors;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	uint8_t val[2000], out[2000];
	char key[32];

	for (int j = 0; j < 300; j++) {
		size_t len = 1 + (size_t)((w->id * 131 + j * 17) % (int)sizeof(val));
		/* Every third value lives in lunar_alloc memory. */
		uint8_t *v = j % 3 ? val : lunar_alloc(w->c, len);

		if (!v) {
			w->errors++;
			continue;
		}
		snprintf(key, sizeof(key), "t%d-%d", w->id, j);
		fill(v, len, (unsigned)(w->id * 1000 + j));
		w->errors += lunar_put(w->c, key, v, len, NULL) != 0;
		w->errors += lunar_get_into(w->c, key, out, sizeof(out)) != (int64_t)len;
		w->errors += memcmp(v, out, len) != 0;
		w->errors += lunar_exists(w->c, key) != 1;
		if (v != val)
			lunar_free(w->c, v);
	}
	return NULL;
}

static void test_shmlib_threads(void **state)
{
	enum { T = 12 };
	struct worker w[T];
	pthread_t th[T];
	struct lunar_client *c;

	/* Fewer slots and ring entries than threads: both must be waited for. */
	F.slots = 4;
	F.entries = 2;
	fake_start(&F);
	c = connect_fake(0);
	for (int i = 0; i < T; i++) {
		w[i] = (struct worker){c, i, 0};
		pthread_create(&th[i], NULL, worker_run, &w[i]);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].errors, 0);
	}
	lunar_close(c);
	fake_stop(&F);
}

struct call {
	struct lunar_client *c;
	int rc;
	int done; /* atomic */
};

static void *call_run(void *arg)
{
	struct call *k = arg;
	uint8_t v[512] = {1}, out[512];

	k->rc = lunar_put(k->c, "nolock", v, sizeof(v), NULL);
	if (!k->rc)
		k->rc = lunar_get_into(k->c, "nolock", out, sizeof(out)) == sizeof(v) ? 0 : -1;
	lc_store_release(&k->done, 1);
	return NULL;
}

static void test_shmlib_call_takes_no_lock(void **state)
{
	struct call k = {NULL, -1, 0};
	struct shm_conn *cn;
	pthread_t th;
	uint64_t end;
	int done;

	fake_start(&F);
	k.c = connect_fake(5000);
	cn = k.c->conn;
	/* Another thread holds the handle's lock (a reconnect) and the
	 * session's (a waiter for a slot or a large arena block): a call
	 * with its session up and small arguments goes through all the same. */
	pthread_mutex_lock(&k.c->lock);
	pthread_mutex_lock(&cn->lock);
	pthread_create(&th, NULL, call_run, &k);
	end = lc_now_ms() + 2000;
	while (!(done = lc_load_acquire(&k.done)) && lc_now_ms() < end)
		usleep(1000);
	pthread_mutex_unlock(&cn->lock);
	pthread_mutex_unlock(&k.c->lock);
	pthread_join(th, NULL);
	assert_true(done);
	assert_int_equal(k.rc, 0);
	lunar_close(k.c);
	fake_stop(&F);
}

struct churn {
	struct lunar_client *c;
	uint8_t *reg; /* registered: 256 bytes a thread */
	int stop;     /* atomic */
	int ok;	      /* atomic */
};

static void *churn_run(void *arg)
{
	static int ids;
	struct churn *k = arg;
	int id = lc_fetch_add(&ids, 1);
	uint8_t *v = k->reg + 256 * (id % 4), out[256];
	char key[16];

	snprintf(key, sizeof(key), "churn%d", id);
	while (!lc_load_acquire(&k->stop))
		if (!lunar_put(k->c, key, v, 256, NULL) &&
		    lunar_get_into(k->c, key, out, sizeof(out)) == 256)
			lc_fetch_add(&k->ok, 1);
	return NULL;
}

static int sessions_kept(const struct lunar_client *c)
{
	int n = 0;

	for (const struct shm_conn *cn = c->conns; cn; cn = cn->older)
		n++;
	return n;
}

static void test_shmlib_reconnect_churn(void **state)
{
	struct churn k = {NULL, NULL, 0, 0};
	pthread_t th[4];
	int fd, fds;

	fake_start(&F);
	k.c = connect_fake(2000);
	/* A round trip first: the fake closes its copies of the handshake's
	 * descriptors after the welcome, and lunar_register looks through
	 * this process's descriptors (TSan would call that a race). */
	assert_int_equal(lunar_health(k.c), 0);
	k.reg = memfd_map(4096, 1, &fd);
	assert_int_equal(lunar_register(k.c, k.reg, 4096), 0);
	fds = test_open_fds();
	/* Calls from four threads while the proxy dies and comes back 20
	 * times: each time some thread reconnects while others call. */
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, churn_run, &k);
	for (int r = 0; r < 20; r++) {
		usleep(20 * 1000);
		fake_stop(&F);
		usleep(2 * 1000);
		fake_start(&F);
	}
	usleep(20 * 1000);
	lc_store_release(&k.stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_true(lc_load_acquire(&k.ok) > 0);
	/* One more reconnect with no call in flight frees every replaced
	 * session: one struct is left, and the descriptors are as before. */
	fake_stop(&F);
	fake_start(&F);
	for (int i = 0; i < 3 && lunar_health(k.c) != 0; i++)
		;
	assert_int_equal(lunar_health(k.c), 0);
	assert_int_equal(sessions_kept(k.c), 1);
	assert_int_equal(test_open_fds(), fds);
	lunar_close(k.c);
	munmap(k.reg, 4096);
	close(fd);
	fake_stop(&F);
}

static void *killer_run(void *arg)
{
	usleep(150 * 1000);
	fake_stop(&F);
	return NULL;
}

static void *hung_exists_run(void *arg)
{
	return (void *)(intptr_t)lunar_exists(arg, "before");
}

static void test_shmlib_proxy_death(void **state)
{
	struct lunar_client *c;
	pthread_t killer, hung[6];
	void *ret;
	uint64_t t0;
	char out[8];

	fake_start(&F);
	c = connect_fake(10000);
	assert_int_equal(lunar_put(c, "before", "v", 1, NULL), 0);
	/* The proxy stops answering, then dies while the call waits. */
	lc_store_release(&F.hang, 1);
	pthread_create(&killer, NULL, killer_run, NULL);
	for (int i = 0; i < 6; i++)
		pthread_create(&hung[i], NULL, hung_exists_run, c);
	t0 = lc_now_ms();
	assert_int_equal(lunar_exists(c, "before"), LUNAR_ERR_PROXY_UNAVAILABLE);
	assert_true(lc_now_ms() - t0 < 2000);
	for (int i = 0; i < 6; i++) {
		pthread_join(hung[i], &ret);
		assert_int_equal((intptr_t)ret, LUNAR_ERR_PROXY_UNAVAILABLE);
	}
	pthread_join(killer, NULL);
	/* Down: quick failures, health says 1. */
	t0 = lc_now_ms();
	assert_int_equal(lunar_exists(c, "before"), LUNAR_ERR_PROXY_UNAVAILABLE);
	assert_int_equal(lunar_health(c), 1);
	assert_true(lc_now_ms() - t0 < 1000);
	/* Back: the next call reconnects. */
	lc_store_release(&F.hang, 0);
	fake_start(&F);
	assert_int_equal(lunar_health(c), 0);
	assert_int_equal(lunar_get_into(c, "before", out, sizeof(out)), 1);
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_timeout(void **state)
{
	struct lunar_client *c;
	uint64_t t0, dt;
	int nadd, ndel;
	uint8_t *p;

	fake_start(&F);
	c = connect_fake(300);
	p = lunar_alloc(c, 64);
	assert_non_null(p);
	lc_store_release(&F.hang, 1);
	t0 = lc_now_ms();
	assert_int_equal(lunar_put(c, "slow", "v", 1, NULL), LUNAR_ERR_PROXY_UNAVAILABLE);
	dt = lc_now_ms() - t0;
	assert_true(dt >= 250 && dt < 1500);
	/* The timed-out session is dropped; a new one serves the next call.
	 * lunar_alloc memory stays valid, shared with the new session. */
	lc_store_release(&F.hang, 0);
	memcpy(p, "late", 4);
	assert_int_equal(lunar_put(c, "slow", p, 4, NULL), 0);
	assert_read_in_place(p);
	assert_int_equal(fake_nsess(), 2);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 2);
	assert_int_equal(lunar_exists(c, "slow"), 1);
	lunar_free(c, p);
	lunar_close(c);
	fake_stop(&F);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_shmlib_handshake, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_bad_header, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_ring_scribbled, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_bad_eventfd, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_arguments, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_put_get, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_batch_get, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_alloc, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_register, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_reg_restart, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_reg_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_arena_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_threads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_call_takes_no_lock, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_reconnect_churn, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_proxy_death, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shmlib_timeout, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
