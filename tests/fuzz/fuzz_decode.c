/*
 * fuzz_decode.c - libFuzzer target for the proxy's validator (proxy/decode.c).
 * Each input becomes a hostile client's region (fuzz_input.h). The target
 * does what the event loop does - the ring bound check, one copy of each
 * published descriptor, px_decode - then, for each request accepted, what a
 * worker and px_complete do with it. Everything outside the arena is
 * ASan-poisoned meanwhile, so any access the validator lets through outside
 * the client's arena is reported, not only one past the region's end.
 * Registered ranges (lc_seg.region 1..LC_MAX_REGIONS) are heap blocks of
 * exactly their length. On top of memory errors it checks the request's
 * promises (private keys, iovecs in the arena or a registered range, counts
 * in range, every range held once and released) and aborts on a broken one.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sanitizer/asan_interface.h>

#include "fuzz_input.h"
#include "lunar.h"
#include "proxy/decode.h"
#include "ring.h"
#include "fuzz_check.h"

static uint8_t *mem;  /* FZ_REGION_MAX bytes; the region is its tail */
static uint8_t *base; /* this input's region: mem + FZ_ARENA_MAX - arena */
static uint64_t arena;
static uint8_t saved_arena[FZ_ARENA_MAX];
static struct px_region rg;
static int verbose;			/* $FUZZ_VERBOSE: print each decode's outcome */
static struct px_mreg *mregs[FZ_MREGS]; /* this input's registered ranges */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	verbose = getenv("FUZZ_VERBOSE") != NULL;
	/* Every region ends where the allocation does: ASan's redzone follows. */
	mem = aligned_alloc(4096, FZ_REGION_MAX);
	if (!mem)
		abort();
	return 0;
}

/* Place this input's region (arena of the given size) at the end of mem. */
static void region_place(uint64_t arena_bytes)
{
	arena = arena_bytes;
	base = mem + (FZ_ARENA_MAX - arena);
	rg.base = base;
	rg.size = FZ_ARENA_OFF + arena;
	rg.ring = (struct lc_ring_ctl *)(base + FZ_RING_OFF);
	rg.sqes = (struct lc_sqe *)(base + FZ_SQES_OFF);
	rg.slots = (struct lc_cslot *)(base + FZ_SLOTS_OFF);
	rg.entries = FZ_ENTRIES;
	rg.slot_count = FZ_SLOTS;
	rg.arena_off = FZ_ARENA_OFF;
	rg.arena_size = arena;
}

static int op_takes_items(uint16_t op)
{
	return op == LC_OP_PUT || op == LC_OP_UPSERT || op == LC_OP_GET || op == LC_OP_GET_SIZE ||
	       op == LC_OP_EXISTS || op == LC_OP_REMOVE || op == LC_OP_PREFIX_MATCH;
}

static int op_takes_segs(uint16_t op)
{
	return op == LC_OP_PUT || op == LC_OP_UPSERT || op == LC_OP_GET;
}

static int in_region(const void *p)
{
	return (const uint8_t *)p >= mem && (const uint8_t *)p < mem + FZ_REGION_MAX;
}

static int in_range(const void *p, uint64_t len, const uint8_t *start, uint64_t size)
{
	return (const uint8_t *)p >= start && (uint64_t)((const uint8_t *)p - start) <= size &&
	       len <= size - (uint64_t)((const uint8_t *)p - start);
}

static int in_arena(const void *p, uint64_t len)
{
	return in_range(p, len, base + FZ_ARENA_OFF, arena);
}

/* In the arena or in one registered range the table names. */
static int allowed(const void *p, uint64_t len)
{
	if (in_arena(p, len))
		return 1;
	for (uint32_t id = 1; id <= LC_MAX_REGIONS; id++) {
		const struct px_mreg *m = rg.mregs[id];

		if (m && in_range(p, len, m->base, m->len))
			return 1;
	}
	return 0;
}

/* Register this input's ranges: heap blocks of exactly their length, one
 * reference each (the session table's). */
/* The engine's deregistration, which px_mreg_put calls on a range's last
 * reference (the target links no engine): the target holds one reference
 * on every range until mregs_drop, so it is never called. */
void eng_mem_del(struct eng_mem *m)
{
	(void)m;
	abort();
}

static void mregs_add(const struct fz_input *in)
{
	memset(rg.mregs, 0, sizeof(rg.mregs));
	for (int k = 0; k < FZ_MREGS; k++) {
		uint32_t id = in->mreg_id[k] % (LC_MAX_REGIONS + 1u);
		struct px_mreg *m;

		mregs[k] = NULL;
		if (id == 0)
			continue;
		m = calloc(1, sizeof(*m));
		if (!m || !(m->base = malloc(in->mreg_len[k] ? in->mreg_len[k] : 1u)))
			abort();
		m->len = in->mreg_len[k];
		memset(m->base, 0x11 * (k + 1), m->len);
		atomic_init(&m->refs, 1);
		mregs[k] = m;
		rg.mregs[id] = m;
	}
}

/* Every request is gone: each range must be back to the table's reference. */
static void mregs_drop(void)
{
	for (int k = 0; k < FZ_MREGS; k++) {
		if (!mregs[k])
			continue;
		FZ_CHECK(atomic_load(&mregs[k]->refs) == 1);
		free(mregs[k]->base);
		free(mregs[k]);
		mregs[k] = NULL;
	}
	memset(rg.mregs, 0, sizeof(rg.mregs));
}

/* While r lives, each range it uses is held by it exactly once. */
static void check_held(const struct px_req *r)
{
	FZ_CHECK(r->nheld <= LC_MAX_REGIONS);
	for (uint32_t i = 0; i < r->nheld; i++) {
		int known = 0;

		for (uint32_t j = 0; j < i; j++)
			FZ_CHECK(r->held[j] != r->held[i]);
		for (uint32_t id = 1; id <= LC_MAX_REGIONS; id++)
			known |= rg.mregs[id] == r->held[i];
		FZ_CHECK(known && atomic_load(&r->held[i]->refs) == 2);
	}
}

static uint64_t fnv(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* Everything before the arena is the proxy's layout (or not the region at
 * all), never the client's bytes. */
static void poison_layout(int on)
{
	size_t n = (size_t)(base - mem) + FZ_ARENA_OFF;

	if (on)
		ASAN_POISON_MEMORY_REGION(mem, n);
	else
		ASAN_UNPOISON_MEMORY_REGION(mem, n);
}

static void check_item(const struct px_req *r, uint32_t i)
{
	const struct px_item *it = &r->items[i];
	uint64_t sum = 0;

	FZ_CHECK(it->key && !in_region(it->key));
	FZ_CHECK(it->key_len >= 1 && it->key_len <= LUNAR_KEY_MAX);
	FZ_CHECK(it->key[it->key_len] == '\0');
	FZ_CHECK(it->result == 0 || it->result == LUNAR_ERR_INVALID_KEY);
	FZ_CHECK(it->item_off == r->sqe.arg_off + (uint64_t)i * sizeof(struct lc_item));
	if (!op_takes_segs(r->sqe.op)) {
		FZ_CHECK(it->iovcnt == 0 && it->iov == NULL && it->total == 0);
		return;
	}
	FZ_CHECK(it->iovcnt >= 1 && it->iovcnt <= LUNAR_IOV_MAX && it->iov);
	for (int k = 0; k < it->iovcnt; k++) {
		FZ_CHECK(allowed(it->iov[k].iov_base, it->iov[k].iov_len));
		sum += it->iov[k].iov_len;
	}
	FZ_CHECK(sum == it->total);
}

static void check_req(const struct px_req *r, const struct lc_sqe *q)
{
	FZ_CHECK(memcmp(&r->sqe, q, sizeof(*q)) == 0);
	FZ_CHECK(q->slot < FZ_SLOTS && q->op > 0 && q->op < LC_OP_MAX);
	if (op_takes_items(q->op)) {
		FZ_CHECK(r->count == q->count && r->count >= 1 && r->count <= LUNAR_BATCH_MAX);
		FZ_CHECK(q->arg_off % 8 == 0 && q->arg_len == (uint64_t)q->count * 32);
		FZ_CHECK(in_arena(base + q->arg_off, q->arg_len));
		FZ_CHECK(r->pattern == NULL);
		for (uint32_t i = 0; i < r->count; i++)
			check_item(r, i);
	} else if (q->op == LC_OP_REMOVE_REGEX) {
		FZ_CHECK(r->count == 0 && r->pattern && !in_region(r->pattern));
		FZ_CHECK(q->arg_len >= 1 && q->arg_len <= LUNAR_KEY_MAX);
		FZ_CHECK(strlen(r->pattern) == q->arg_len);
	} else {
		FZ_CHECK(r->count == 0 && r->items == NULL && r->pattern == NULL);
		FZ_CHECK(q->count == 0 && q->arg_len == 0);
	}
}

/* What a worker does with the bytes: reads a put's value, fills a get's
 * destination. ASan objects if any iovec leaves the arena. */
static void use_values(const struct px_req *r)
{
	volatile uint8_t sink = 0;

	for (uint32_t i = 0; i < r->count; i++) {
		const struct px_item *it = &r->items[i];

		for (int k = 0; k < it->iovcnt; k++) {
			uint8_t *p = it->iov[k].iov_base;
			size_t n = it->iov[k].iov_len;

			if (r->sqe.op == LC_OP_GET) {
				memset(p, 0x5a, n);
			} else if (n) {
				sink ^= p[0];
				sink ^= p[n - 1];
				sink ^= (uint8_t)fnv(p, n);
			}
		}
	}
	(void)sink;
}

/* The client rewrites its whole arena after the proxy took the request:
 * nothing the proxy keeps may change. The arena is put back afterwards for
 * the next descriptor of the batch. */
static void race_client(const struct px_req *r)
{
	uint64_t keys = 0, pat = r->pattern ? fnv(r->pattern, strlen(r->pattern)) : 0;

	for (uint32_t i = 0; i < r->count; i++)
		keys ^= fnv(r->items[i].key, r->items[i].key_len + 1u) + i;
	memcpy(saved_arena, base + FZ_ARENA_OFF, arena);
	memset(base + FZ_ARENA_OFF, 0xee, arena);
	for (uint32_t i = 0; i < r->count; i++)
		keys ^= fnv(r->items[i].key, r->items[i].key_len + 1u) + i;
	FZ_CHECK(keys == 0);
	FZ_CHECK(!r->pattern || fnv(r->pattern, strlen(r->pattern)) == pat);
	memcpy(base + FZ_ARENA_OFF, saved_arena, arena);
}

static void complete(const struct px_req *r, uint8_t state, int64_t result)
{
	struct lc_cslot *slot = &rg.slots[r->sqe.slot];

	ASAN_UNPOISON_MEMORY_REGION(rg.slots, FZ_SLOTS * sizeof(struct lc_cslot));
	slot->state = state % 4u;
	px_complete(&rg, r, result);
	FZ_CHECK(slot->state == LC_SLOT_DONE && slot->seq == r->sqe.seq && slot->result == result);
	for (uint32_t i = 0; i < r->count; i++) {
		int64_t got;

		memcpy(&got, base + r->items[i].item_off + offsetof(struct lc_item, result),
		       sizeof(got));
		FZ_CHECK(got == r->items[i].result);
	}
	ASAN_POISON_MEMORY_REGION(rg.slots, FZ_SLOTS * sizeof(struct lc_cslot));
}

/* Lay the input out as a client would have left its region. */
static void region_fill(const struct fz_input *in, const uint8_t *bytes, size_t n)
{
	uint32_t tail = in->mode & FZ_RAW_TAIL ? in->tail : in->cons + 1u + ((in->mode >> 1) & 3u);

	region_place(FZ_ARENA_BYTES(in->arena_pages));
	memset(mem, 0, FZ_REGION_MAX);
	mregs_add(in);
	rg.ring->prod_tail = tail;
	rg.ring->cons_head = in->cons;
	for (uint32_t k = 0; k < FZ_SQES; k++)
		rg.sqes[(in->cons + k) & (FZ_ENTRIES - 1)] = in->sqe[k];
	memcpy(base + FZ_ARENA_OFF, bytes, n < arena ? n : arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_input in;
	int64_t n;
	uint32_t cons;

	memset(&in, 0, sizeof(in));
	memcpy(&in, data, size < sizeof(in) ? size : sizeof(in));
	region_fill(&in, data + (size < sizeof(in) ? size : sizeof(in)),
		    size < sizeof(in) ? 0 : size - sizeof(in));
	cons = in.cons;
	n = lc_ring_consumable(rg.ring, rg.entries, cons);
	if (n < 0) {
		FZ_CHECK(n == -EPROTO && rg.ring->prod_tail - cons > FZ_ENTRIES);
		goto out; /* the loop disconnects the client here */
	}
	FZ_CHECK(n <= FZ_ENTRIES && rg.ring->prod_tail - cons == (uint32_t)n);
	for (int64_t i = 0; i < n; i++, cons++) {
		struct px_req *r = NULL;
		const char *why = NULL;
		struct lc_sqe sqe;
		int rc;

		memcpy(&sqe, &rg.sqes[cons & (rg.entries - 1)], sizeof(sqe));
		poison_layout(1);
		rc = px_decode(&rg, &sqe, &r, &why);
		if (verbose)
			fprintf(stderr, "fuzz_decode: [%u] op %u count %u: %d %s\n", cons, sqe.op,
				sqe.count, rc, rc ? why : "ok");
		if (rc) {
			poison_layout(0);
			FZ_CHECK(r == NULL);
			FZ_CHECK(rc == -ENOMEM || (rc == LUNAR_ERR_PROTOCOL && why && *why));
			break; /* the loop disconnects the client here */
		}
		check_req(r, &sqe);
		check_held(r);
		use_values(r);
		race_client(r);
		complete(r, in.slot_state, (int64_t)sqe.seq ^ (int64_t)i);
		px_req_free(r);
		poison_layout(0);
	}
	lc_ring_release(rg.ring, cons);
out:
	mregs_drop();
	return 0;
}
