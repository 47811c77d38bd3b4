/*
 * test_shmlib_fake.h - the fake proxy the test_shmlib*.c binaries run liblunar
 * against, in threads of the test: it listens on a temp socket, hands out a
 * sealed memfd region laid out per shm_abi.h, maps the memory the client
 * registers on the socket, consumes the ring and completes requests from a
 * small in-memory map. It is a fixture, not a proxy: it trusts the client.
 * Also the per-case setup and teardown, and the tests' memory helpers.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_SHMLIB_FAKE_H
#define LUNAR_TESTS_UNIT_TEST_SHMLIB_FAKE_H

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
#include "crc32c.h"
#include "futex.h"
#include "lunar.h"
#include "ring.h"
#include "shm_abi.h"
#include "shmlib/copyout.h"
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
	int hang;		/* atomic: consume requests, never complete them */
	int ring_scribble;	/* 1: write the producers' old prod_head word, 2: cons_head */
	int bad_evfd;		/* 1: a blocking pipe for the eventfd, 2: a blocking eventfd */
	uint16_t welcome_flags; /* LC_WELCOME_* */
	int land;		/* enum fake_land: how a one-value get lands (fake_land) */
	uint64_t land_word;	/* FAKE_LAND_QUIET: the word it stores (0: none) */
	int land_slept;		/* FAKE_LAND_QUIET: the waiter went to sleep meanwhile */
	uint32_t entries, slots;
	/* behaviour, under lock */
	int delay_ms;	    /* before completing each request */
	int32_t refuse_reg; /* the code for every ADD */
	int reg_silent;	    /* take registrations, never reply */
	/* what the fake saw, under lock */
	char tenant[LC_TENANT_MAX];
	uint32_t last_region; /* of the first segment of the last put or get */
	uint8_t *last_ptr;    /* where that segment began, in the fake's mappings */
	int unaligned;	      /* staged segments not on a cache line of the arena */
	int crc_puts;	      /* puts that came with LC_SQE_SEG_CRC */
	int crc_wrong;	      /* their pieces whose crc is not their bytes' */
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

static inline int kv_find(struct fake *f, const uint8_t *key, size_t len)
{
	for (int i = 0; i < f->nkv; i++)
		if (strlen(f->kv[i].key) == len && !memcmp(f->kv[i].key, key, len))
			return i;
	return -1;
}

static inline void kv_drop(struct fake *f, int i)
{
	free(f->kv[i].key);
	free(f->kv[i].val);
	f->kv[i] = f->kv[--f->nkv];
}

/* Where a segment's bytes are, in the fake's own mappings. */
static inline uint8_t *seg_ptr(const struct fake_sess *s, const struct lc_seg *sg)
{
	return sg->region ? s->regs[sg->region].base + sg->off : s->base + sg->off;
}

static inline void seg_seen(struct fake_sess *s, const struct lc_seg *sg)
{
	s->f->last_region = sg->region;
	s->f->last_ptr = seg_ptr(s, sg);
}

static inline int64_t op_put(struct fake_sess *s, const struct lc_item *it, int upsert)
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

static inline int64_t op_get(struct fake_sess *s, const struct lc_item *it)
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

static inline int64_t op_item(struct fake_sess *s, uint16_t op, const struct lc_item *it)
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
static inline int64_t op_remove_many(struct fake *f, const uint8_t *pat, size_t len)
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

static inline int fake_in_arena(const struct fake_sess *s, uint64_t off, uint64_t len)
{
	return off >= s->h.arena_off && off - s->h.arena_off <= s->h.arena_size &&
	       len <= s->h.arena_size - (off - s->h.arena_off);
}

static inline int fake_seg_ok(const struct fake_sess *s, const struct lc_seg *sg)
{
	const struct fake_reg *r = &s->regs[sg->region];

	if (!sg->region)
		return fake_in_arena(s, sg->off, sg->len);
	return sg->region <= LC_MAX_REGIONS && r->base && sg->off <= r->len &&
	       sg->len <= r->len - sg->off;
}

/* The rules the real proxy disconnects a client for (docs/shm-abi.md). */
static inline void fake_validate(const struct fake_sess *s, const struct lc_sqe *e)
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
	FAKE_CHECK(!(e->flags & LC_SQE_SEG_CRC) || e->op == LC_OP_PUT || e->op == LC_OP_UPSERT);
	if (e->flags & LC_SQE_SEG_CRC) {
		pthread_mutex_lock(&s->f->lock);
		s->f->crc_puts++;
		pthread_mutex_unlock(&s->f->lock);
	}
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
		for (uint32_t j = 0; j < it[i].nseg; j++) {
			FAKE_CHECK(fake_seg_ok(s, &sg[j]));
			if (e->flags & LC_SQE_SEG_CRC &&
			    sg[j].crc != lc_crc32c(0, seg_ptr(s, &sg[j]), sg[j].len)) {
				pthread_mutex_lock(&s->f->lock);
				s->f->crc_wrong++;
				pthread_mutex_unlock(&s->f->lock);
			}
			if (!sg[j].region && sg[j].off % LC_CACHELINE) {
				pthread_mutex_lock(&s->f->lock);
				s->f->unaligned++;
				pthread_mutex_unlock(&s->f->lock);
			}
		}
	}
}

static inline int64_t fake_exec(struct fake_sess *s, const struct lc_sqe *e)
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

/* How the fake lands a one-value get of SHM_COPYOUT_MIN bytes or more in
 * one piece, after its bytes are in the arena (each step told in the slot's
 * landed word, FAKE_LAND_PAUSE_US apart, for a waiter to copy out). */
enum fake_land {
	FAKE_LAND_AT_ONCE, /* nothing told: the bytes are there at DONE */
	/* the first half told, then scribbled over (the waiter must have kept
	 * its copy), then all told */
	FAKE_LAND_SCRIBBLED,
	/* a first attempt's wrong first half told, then a second attempt
	 * (gen 2) lands the right bytes */
	FAKE_LAND_RETRIED,
	/* the same wrong half told, then the right bytes land untold by an
	 * attempt of another gen (as a disk read does) */
	FAKE_LAND_UNTOLD,
	/* land_word stored (unless 0), then up to 2 s for the waiter to
	 * sleep (land_slept), then DONE */
	FAKE_LAND_QUIET,
};
#define FAKE_LAND_PAUSE_US 300000

/* n bytes of src into dst, each XOR flip, by stores no sanitizer watches:
 * the fake rewrites bytes a copying waiter read before, ordered by the
 * pause alone, as a proxy's next attempt at a read would. */
__attribute__((no_sanitize("thread"))) static inline void
fake_poke(uint8_t *dst, const uint8_t *src, size_t n, uint8_t flip)
{
	volatile uint8_t *d = dst;

	for (size_t i = 0; i < n; i++)
		d[i] = src[i] ^ flip;
}

static inline void fake_land(struct fake_sess *s, const struct lc_sqe *e, struct lc_cslot *sl)
{
	const struct lc_item *it = (const struct lc_item *)(s->base + e->arg_off);
	const struct lc_seg *sg = (const struct lc_seg *)(s->base + it->seg_off);
	uint8_t *at = seg_ptr(s, sg), *v;
	size_t len, half;
	int i;

	if (e->op != LC_OP_GET || e->count != 1 || it->nseg != 1 ||
	    it->result < (int64_t)SHM_COPYOUT_MIN)
		return;
	if (s->f->land == FAKE_LAND_QUIET) {
		if (s->f->land_word)
			lc_store_release(&sl->landed, s->f->land_word);
		for (int k = 0; k < 2000 && lc_load_acquire(&sl->state) != LC_SLOT_WAITING; k++)
			usleep(1000);
		s->f->land_slept = lc_load_acquire(&sl->state) == LC_SLOT_WAITING;
		return;
	}
	pthread_mutex_lock(&s->f->lock);
	i = kv_find(s->f, s->base + it->key_off, it->key_len);
	len = s->f->kv[i].len;
	v = malloc(len);
	FAKE_CHECK(v != NULL);
	memcpy(v, s->f->kv[i].val, len);
	pthread_mutex_unlock(&s->f->lock);
	half = len / 2;
	if (s->f->land != FAKE_LAND_SCRIBBLED)
		fake_poke(at, v, half, 0xff);
	lc_store_release(&sl->landed, lc_landed_pack(1, 1, half));
	usleep(FAKE_LAND_PAUSE_US);
	switch (s->f->land) {
	case FAKE_LAND_SCRIBBLED:
		fake_poke(at, v, half, 0x5a);
		lc_store_release(&sl->landed, lc_landed_pack(1, 1, len));
		break;
	case FAKE_LAND_RETRIED:
		lc_store_release(&sl->landed, lc_landed_pack(2, 1, 0));
		fake_poke(at, v, half, 0);
		lc_store_release(&sl->landed, lc_landed_pack(2, 1, len));
		break;
	default: fake_poke(at, v, half, 0); lc_store_release(&sl->landed, lc_landed_pack(3, 0, 0));
	}
	free(v);
}

static inline void fake_complete(struct fake_sess *s, const struct lc_sqe *e)
{
	struct lc_cslot *slots = (struct lc_cslot *)(s->base + s->h.slots_off);
	struct lc_cslot *sl;
	int64_t r;

	fake_validate(s, e);
	sl = &slots[e->slot];
	/* A telling attempt begins at once, as a proxy's does before its
	 * transfer: the waiter need not wait for the fake's copies to start. */
	if (s->f->land && s->f->land != FAKE_LAND_QUIET && e->op == LC_OP_GET)
		lc_store_release(&sl->landed, lc_landed_pack(1, 1, 0));
	pthread_mutex_lock(&s->f->lock);
	if (s->f->delay_ms)
		usleep(s->f->delay_ms * 1000);
	r = fake_exec(s, e);
	pthread_mutex_unlock(&s->f->lock);
	if (s->f->land)
		fake_land(s, e, sl);
	sl->result = r;
	sl->seq = e->seq;
	if (lc_xchg(&sl->state, (uint32_t)LC_SLOT_DONE) == LC_SLOT_WAITING)
		lc_futex_wake(&sl->state, 1);
}

/* --- the fake's sessions --- */

static inline int fake_drain(struct fake_sess *s, uint32_t *cons)
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
static inline int32_t fake_reg_add(struct fake_sess *s, const struct lc_reg_req *q, int fd,
				   uint32_t *id)
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

static inline int32_t fake_reg_del(struct fake_sess *s, uint32_t id)
{
	if (!id || id > LC_MAX_REGIONS || !s->regs[id].base)
		return LUNAR_ERR_INVALID_PARAMS;
	munmap(s->regs[id].base, s->regs[id].len);
	s->regs[id].base = NULL;
	return 0;
}

/* One registration request; -1 when the client went away. */
static inline int fake_reg(struct fake_sess *s)
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

static inline void *fake_sess_run(void *arg)
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

static inline int fake_region(struct fake_sess *s, int *memfd)
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

static inline void fake_handshake(struct fake *f, int sock)
{
	struct lc_welcome w = {
	    .magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION, .flags = f->welcome_flags};
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

static inline void *fake_accept_run(void *arg)
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

static inline void fake_start(struct fake *f)
{
	lc_store_release(&f->stop, 0);
	f->lfd = lc_uds_listen(f->path, 0600);
	FAKE_CHECK(f->lfd >= 0);
	pthread_create(&f->acceptor, NULL, fake_accept_run, f);
}

/* Stop like a dying proxy: every client socket and the listener close; the
 * socket file stays, so connects are refused. */
static inline void fake_stop(struct fake *f)
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
static inline int fake_seen(const int *what)
{
	int n;

	pthread_mutex_lock(&F.lock);
	n = *what;
	pthread_mutex_unlock(&F.lock);
	return n;
}

static inline int fake_nsess(void)
{
	return fake_seen(&F.nsess);
}

/* The byte the fake sees where the last put's value (or get's destination)
 * began, and in which region that was. */
static inline uint8_t fake_last_byte(void)
{
	uint8_t b;

	pthread_mutex_lock(&F.lock);
	b = *F.last_ptr;
	pthread_mutex_unlock(&F.lock);
	return b;
}

static inline int fake_unaligned(void)
{
	return fake_seen(&F.unaligned);
}

/* Puts that came with LC_SQE_SEG_CRC, and their pieces with a wrong crc. */
static inline int fake_crc_puts(void)
{
	return fake_seen(&F.crc_puts);
}

static inline int fake_crc_wrong(void)
{
	return fake_seen(&F.crc_wrong);
}

static inline uint32_t fake_last_region(void)
{
	uint32_t r;

	pthread_mutex_lock(&F.lock);
	r = F.last_region;
	pthread_mutex_unlock(&F.lock);
	return r;
}

/* Registration counters: ADDs, DELs, and ADDs the fake found bad. */
static inline void fake_regs_seen(int *nadd, int *ndel)
{
	pthread_mutex_lock(&F.lock);
	*nadd = F.nadd;
	*ndel = F.ndel;
	FAKE_CHECK(F.bad_regs == 0);
	pthread_mutex_unlock(&F.lock);
}

static inline void fake_set(int *field, int v)
{
	pthread_mutex_lock(&F.lock);
	*field = v;
	pthread_mutex_unlock(&F.lock);
}

static inline void fake_tenant(char *out)
{
	pthread_mutex_lock(&F.lock);
	memcpy(out, F.tenant, sizeof(F.tenant));
	pthread_mutex_unlock(&F.lock);
}

static inline int setup(void **state)
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

static inline int teardown(void **state)
{
	op_remove_many(&F, NULL, 0);
	unlink(F.path);
	rmdir(F.dir);
	return 0;
}

static inline struct lunar_client *connect_fake(unsigned timeout_ms)
{
	struct lunar_opts o = {.socket_path = F.path, .timeout_ms = timeout_ms};
	struct lunar_client *c = NULL;

	assert_int_equal(lunar_connect(&o, &c), 0);
	return c;
}

static inline void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7);
}

/* Application memory: a memfd of len bytes mapped shared read-write,
 * sealed against shrinking when seal; *fd stays open. */
static inline uint8_t *memfd_map(size_t len, int seal, int *fd)
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
static inline void assert_read_in_place(uint8_t *p)
{
	assert_int_not_equal(fake_last_region(), 0);
	p[0] ^= 0xff;
	assert_int_equal(fake_last_byte(), p[0]);
	p[0] ^= 0xff;
}

#endif /* LUNAR_TESTS_UNIT_TEST_SHMLIB_FAKE_H */
