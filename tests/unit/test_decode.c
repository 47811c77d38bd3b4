/*
 * test_decode.c - the proxy's validation of client requests in shared
 * memory: every offset, length and count is checked, keys are copied, and
 * per-key problems become per-key results rather than disconnects.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "lunar.h"
#include "proxy/decode.h"
#include "tests/cmocka_main.h"

#define REGION	  (1u << 20)
#define ARENA_OFF 65536u

struct fix {
	struct px_region rg;
	uint8_t *mem;
	uint64_t next; /* bump allocator in the arena */
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	f->mem = aligned_alloc(4096, REGION);
	memset(f->mem, 0, REGION);
	f->rg.base = f->mem;
	f->rg.size = REGION;
	f->rg.slots = (struct lc_cslot *)(f->mem + 8192);
	f->rg.slot_count = 16;
	f->rg.entries = 16;
	f->rg.arena_off = ARENA_OFF;
	f->rg.arena_size = REGION - ARENA_OFF;
	f->next = ARENA_OFF;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	free(f->mem);
	free(f);
	return 0;
}

static uint64_t put_bytes(struct fix *f, const void *p, size_t n)
{
	uint64_t off = f->next;

	memcpy(f->mem + off, p, n);
	f->next = (off + n + 7) & ~7ull;
	return off;
}

/* One item with key k and one value segment of len bytes. */
static struct lc_sqe one_item(struct fix *f, uint16_t op, const char *k, uint64_t len)
{
	struct lc_seg seg = {0, 0, f->next + 4096, len};
	struct lc_item it = {0};
	struct lc_sqe q = {.op = op, .slot = 3, .count = 1, .seq = 9};

	it.key_off = put_bytes(f, k, strlen(k));
	it.key_len = (uint32_t)strlen(k);
	if (op == LC_OP_PUT || op == LC_OP_GET) {
		it.nseg = 1;
		it.seg_off = put_bytes(f, &seg, sizeof(seg));
	}
	q.arg_off = put_bytes(f, &it, sizeof(it));
	q.arg_len = sizeof(it);
	return q;
}

/* A registered 8 KiB range as f's region 3; px_mreg_put gives it back. */
static struct px_mreg *region3(struct fix *f)
{
	struct px_mreg *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->len = 8192;
	m->base = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(m->base != MAP_FAILED);
	atomic_init(&m->refs, 1);
	f->rg.mregs[3] = m;
	return m;
}

static void expect_violation(struct fix *f, const struct lc_sqe *q)
{
	struct px_req *r = NULL;
	const char *why = NULL;

	assert_int_equal(px_decode(&f->rg, q, &r, &why), LUNAR_ERR_PROTOCOL);
	assert_non_null(why);
	assert_null(r);
}

static void test_decode_valid_put(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = one_item(f, LC_OP_PUT, "key-1", 100);
	struct px_req *r;
	const char *why;

	assert_int_equal(px_decode(&f->rg, &q, &r, &why), 0);
	assert_int_equal(r->count, 1);
	assert_string_equal(r->items[0].key, "key-1");
	assert_int_equal(r->items[0].result, 0);
	assert_int_equal(r->items[0].total, 100);
	assert_ptr_equal(r->items[0].iov[0].iov_base, f->mem + ARENA_OFF + 4096);
	assert_int_equal(px_item_read_dir(&r->items[0]), ENG_READ_STAGED);
	px_req_free(r);
}

static void test_decode_bad_slot_and_op(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = one_item(f, LC_OP_EXISTS, "k", 0);

	q.slot = 16;
	expect_violation(f, &q);
	q.slot = 0;
	q.op = 0;
	expect_violation(f, &q);
	q.op = LC_OP_MAX;
	expect_violation(f, &q);
}

static void test_decode_item_array_bounds(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = one_item(f, LC_OP_EXISTS, "k", 0);
	struct lc_sqe bad;

	bad = q;
	bad.arg_off = REGION - 16; /* runs past the end */
	expect_violation(f, &bad);
	bad = q;
	bad.arg_off = UINT64_MAX - 7; /* overflows */
	expect_violation(f, &bad);
	bad = q;
	bad.arg_off = 0; /* header, not arena */
	expect_violation(f, &bad);
	bad = q;
	bad.count = 2; /* arg_len disagrees */
	expect_violation(f, &bad);
	bad = q;
	bad.count = LUNAR_BATCH_MAX + 1;
	bad.arg_len = (uint64_t)bad.count * sizeof(struct lc_item);
	expect_violation(f, &bad);
	bad = q;
	bad.count = 0;
	bad.arg_len = 0;
	expect_violation(f, &bad);
}

static void test_decode_key_and_segment_bounds(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = one_item(f, LC_OP_PUT, "key", 10);
	struct lc_item *it = (struct lc_item *)(f->mem + q.arg_off);
	struct lc_seg *seg = (struct lc_seg *)(f->mem + it->seg_off);
	struct lc_item saved = *it;

	it->key_len = LUNAR_KEY_MAX + 1;
	expect_violation(f, &q);
	*it = saved;
	it->key_off = REGION - 1;
	it->key_len = 2;
	expect_violation(f, &q);
	*it = saved;
	it->nseg = LUNAR_IOV_MAX + 1;
	expect_violation(f, &q);
	*it = saved;
	seg->len = UINT64_MAX;
	expect_violation(f, &q);
	seg->len = 10;
	seg->region = 1;
	expect_violation(f, &q);
	seg->region = 0;
	*it = saved;
	it->nseg = 1;
	q.op = LC_OP_EXISTS; /* segments on a key-only op */
	expect_violation(f, &q);
}

static void test_decode_registered_region(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = one_item(f, LC_OP_GET, "reg", 10);
	struct lc_item *it = (struct lc_item *)(f->mem + q.arg_off);
	struct lc_seg *seg = (struct lc_seg *)(f->mem + it->seg_off);
	struct px_mreg *m = region3(f); /* Given a registered 8 KiB range as region 3 */
	struct px_req *r;
	const char *why;

	/* When a segment names it inside its bounds, the request holds it */
	seg->region = 3;
	seg->off = 8000;
	seg->len = 192;
	assert_int_equal(px_decode(&f->rg, &q, &r, &why), 0);
	assert_ptr_equal(r->items[0].iov[0].iov_base, m->base + 8000);
	assert_int_equal(px_item_read_dir(&r->items[0]), ENG_READ);
	assert_int_equal(atomic_load(&m->refs), 2);
	px_req_free(r);
	assert_int_equal(atomic_load(&m->refs), 1);
	/* Then past its end, an unknown region or an id out of range is a violation */
	seg->len = 193;
	expect_violation(f, &q);
	seg->len = 1;
	seg->region = 4;
	expect_violation(f, &q);
	seg->region = LC_MAX_REGIONS + 1;
	expect_violation(f, &q);
	assert_int_equal(atomic_load(&m->refs), 1);
	px_mreg_put(m);
}

/* A get of two segments in regions a and b (0: the arena, else registered). */
static struct lc_sqe two_segs(struct fix *f, uint32_t a, uint32_t b)
{
	struct lc_seg segs[2] = {{a, 0, a ? 0 : f->next + 4096, 64},
				 {b, 0, b ? 64 : f->next + 8192, 64}};
	struct lc_item it = {.key_len = 3, .nseg = 2};
	struct lc_sqe q = {.op = LC_OP_GET, .slot = 3, .count = 1, .seq = 9};

	it.key_off = put_bytes(f, "mix", 3);
	it.seg_off = put_bytes(f, segs, sizeof(segs));
	q.arg_off = put_bytes(f, &it, sizeof(it));
	q.arg_len = sizeof(it);
	return q;
}

static void test_decode_read_dir(void **state)
{
	static const uint32_t cases[][3] = {
	    /* region of each segment, then 1 if the get may keep its bytes cached */
	    {0, 0, 1},
	    {0, 3, 0},
	    {3, 0, 0},
	    {3, 3, 0},
	};
	struct fix *f = *state;
	struct px_mreg *m = region3(f); /* Given a registered 8 KiB range as region 3 */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct lc_sqe q = two_segs(f, cases[i][0], cases[i][1]);
		struct px_req *r;
		const char *why;

		/* When a get names these segments */
		assert_int_equal(px_decode(&f->rg, &q, &r, &why), 0);
		/* Then it reads with cached stores only if all of them are in the arena */
		assert_int_equal(px_item_read_dir(&r->items[0]),
				 cases[i][2] ? ENG_READ_STAGED : ENG_READ);
		/* and tells what landed of none: its bytes are in two pieces */
		assert_null(r->items[0].landed);
		px_req_free(r);
	}
	px_mreg_put(m);
}

/* A get of one value into one piece of the arena tells what landed in its
 * completion slot's word (lc_cslot.landed); a put, or a get into registered
 * memory, tells nothing. */
static void test_decode_landed_word(void **state)
{
	struct fix *f = *state;
	struct lc_sqe get = one_item(f, LC_OP_GET, "g", 100),
		      put = one_item(f, LC_OP_PUT, "p", 100);
	struct lc_sqe reg = two_segs(f, 3, 3);
	struct px_mreg *m = region3(f);
	struct px_req *r;
	const char *why;

	((struct lc_item *)(f->mem + reg.arg_off))->nseg = 1;
	assert_int_equal(px_decode(&f->rg, &get, &r, &why), 0);
	assert_ptr_equal(r->items[0].landed, &f->rg.slots[get.slot].landed);
	px_req_free(r);
	assert_int_equal(px_decode(&f->rg, &put, &r, &why), 0);
	assert_null(r->items[0].landed);
	px_req_free(r);
	assert_int_equal(px_decode(&f->rg, &reg, &r, &why), 0);
	assert_int_equal(r->items[0].iovcnt, 1);
	assert_null(r->items[0].landed);
	px_req_free(r);
	px_mreg_put(m);
}

static void test_decode_preferred_segments(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = one_item(f, LC_OP_PUT, "k", 10);
	struct px_req *r;
	const char *why;

	/* Given two names after each other, a put gets them both */
	q.pref_off = put_bytes(f, "a:1\0bb:2", 9);
	q.pref_len = 9;
	assert_int_equal(px_decode(&f->rg, &q, &r, &why), 0);
	assert_int_equal(r->npref, 2);
	assert_string_equal(r->pref[0], "a:1");
	assert_string_equal(r->pref[1], "bb:2");
	px_req_free(r);
	/* Unterminated, empty names, too many, or on a get: violations */
	q.pref_len = 8;
	expect_violation(f, &q);
	q.pref_off = put_bytes(f, "\0x\0", 3);
	q.pref_len = 3;
	expect_violation(f, &q);
	q.pref_off = put_bytes(f,
			       "1\0"
			       "2\0"
			       "3\0"
			       "4\0"
			       "5\0"
			       "6\0"
			       "7\0"
			       "8\0"
			       "9",
			       18);
	q.pref_len = 18;
	expect_violation(f, &q);
	q = one_item(f, LC_OP_GET, "k", 10);
	q.pref_off = put_bytes(f, "a:1", 4);
	q.pref_len = 4;
	expect_violation(f, &q);
}

static void test_decode_bad_key_is_per_item(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = one_item(f, LC_OP_EXISTS, "bad\x01key", 0);
	struct px_req *r;
	const char *why;

	assert_int_equal(px_decode(&f->rg, &q, &r, &why), 0);
	assert_int_equal(r->items[0].result, LUNAR_ERR_INVALID_KEY);
	px_req_free(r);
}

static void test_decode_no_args_ops(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = 1};
	struct px_req *r;
	const char *why;

	assert_int_equal(px_decode(&f->rg, &q, &r, &why), 0);
	px_req_free(r);
	q.count = 1;
	expect_violation(f, &q);
}

static void test_decode_pattern(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = {.op = LC_OP_REMOVE_REGEX, .slot = 1};
	struct px_req *r;
	const char *why;

	q.arg_off = put_bytes(f, "^a.*", 4);
	q.arg_len = 4;
	assert_int_equal(px_decode(&f->rg, &q, &r, &why), 0);
	assert_string_equal(r->pattern, "^a.*");
	px_req_free(r);
	q.count = 1;
	expect_violation(f, &q);
	q.count = 0;
	q.arg_off = put_bytes(f, "a\0b", 3);
	q.arg_len = 3;
	expect_violation(f, &q);
}

static void test_decode_complete_writes_results(void **state)
{
	struct fix *f = *state;
	struct lc_sqe q = one_item(f, LC_OP_GET_SIZE, "k", 0);
	struct px_req *r;
	const char *why;
	uint64_t before;

	assert_int_equal(px_decode(&f->rg, &q, &r, &why), 0);
	f->rg.slots[3].state = LC_SLOT_PENDING;
	r->items[0].result = 1234;
	before = lc_now_ns();
	px_complete(&f->rg, r, 0);
	assert_int_equal(((struct lc_item *)(f->mem + q.arg_off))->result, 1234);
	/* The stamp the waiter's spin learns from (shmlib/spin.h). */
	assert_true(f->rg.slots[3].done_ns >= before);
	assert_true(f->rg.slots[3].done_ns <= lc_now_ns());
	assert_int_equal(f->rg.slots[3].state, LC_SLOT_DONE);
	assert_int_equal(f->rg.slots[3].seq, 9);
	px_req_free(r);
}

LUNAR_TEST_MAIN_EACH(setup, teardown, test_decode_valid_put, test_decode_bad_slot_and_op,
		     test_decode_item_array_bounds, test_decode_key_and_segment_bounds,
		     test_decode_registered_region, test_decode_read_dir, test_decode_landed_word,
		     test_decode_preferred_segments, test_decode_bad_key_is_per_item,
		     test_decode_no_args_ops, test_decode_pattern,
		     test_decode_complete_writes_results)
