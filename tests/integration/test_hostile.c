/*
 * test_hostile.c - the proxy trusts nothing in shared memory (SPEC §5.5).
 * A well-behaved client B runs put/get/verify/remove in a thread for the whole
 * test while raw clients - handshaking by hand, then writing whatever they
 * like into their region - corrupt ring indexes, send descriptors with
 * overflowing offsets, lengths, counts and slot numbers, flood the eventfd
 * or the request queue, make the shared eventfd blocking and drain it, try
 * to resize the sealed memfd, unmap it, register memory the proxy could
 * lose, send junk or too many descriptors on the socket, say nothing at
 * all, or vanish mid-request. Each violator must see the hang-up within 2 s with
 * a "disconnected:" reason in the proxy's log; B must see no error and no
 * call longer than 1 s; the proxy must still serve new clients and give back
 * every descriptor it took. Run it under `make asan` too: a use-after-free
 * in the proxy shows only there. The floods are in test_hostile_floods.c, the
 * memory and descriptor cases in test_hostile_memory.c; what they share in
 * hostile_util.h.
 */
#include "hostile_util.h"
#include "tests/cmocka_main.h"

/* --- the misbehaviours: each leaves the client in violation --- */

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void act_random_descriptors(struct raw *c)
{
	uint64_t *a = (uint64_t *)(c->base + c->h.arena_off);

	for (size_t i = 0; i < 65536 / 8; i++)
		a[i] = rnd();
	for (int i = 0; i < 8; i++) {
		struct lc_sqe q;

		for (size_t k = 0; k < sizeof(q) / 8; k++)
			((uint64_t *)&q)[k] = rnd();
		raw_submit(c, &q);
	}
}

/* A good request first, so the proxy's consumer index is past 0. */
static void warm_up(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = 0, .seq = 1};

	c->slots[0].state = LC_SLOT_PENDING;
	raw_submit(c, &q);
	H_ASSERT_MSG(raw_wait_done(c, 0, 5000), "the proxy never completed a valid HEALTH");
}

static void act_tail_backwards(struct raw *c)
{
	warm_up(c);
	/* release: pairs with the proxy's lc_load_acquire of prod_tail in common/ring.c */
	lc_store_release(&c->ring->prod_tail, 0u);
	raw_kick(c);
}

static void act_tail_far_ahead(struct raw *c)
{
	warm_up(c);
	/* release: pairs with the proxy's lc_load_acquire of prod_tail in common/ring.c */
	lc_store_release(&c->ring->prod_tail, c->ring->cons_head + (1u << 31));
	raw_kick(c);
}

static void act_arg_off_overflow(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_EXISTS, .slot = 1, .count = 1, .arg_len = 32};

	q.arg_off = UINT64_MAX - 31;
	raw_submit(c, &q);
}

static void act_arg_len_overflow(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_GET_SIZE, .slot = 1, .count = 1};

	q.arg_off = c->h.arena_off;
	q.arg_len = UINT64_MAX - 7;
	raw_submit(c, &q);
}

static void act_count_huge(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_EXISTS, .slot = 1, .count = UINT32_MAX};

	q.arg_off = c->h.arena_off;
	q.arg_len = (uint64_t)q.count * sizeof(struct lc_item);
	raw_submit(c, &q);
}

static void act_count_over_batch(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_REMOVE, .slot = 1, .count = LUNAR_BATCH_MAX + 1};

	q.arg_off = c->h.arena_off;
	q.arg_len = (uint64_t)q.count * sizeof(struct lc_item);
	raw_submit(c, &q);
}

static void act_key_past_region(struct raw *c)
{
	struct lc_item it = {.key_off = c->size - 10, .key_len = 100};
	struct lc_sqe q = raw_item_sqe(c, LC_OP_EXISTS, &it);

	raw_submit(c, &q);
}

static void act_key_len_huge(struct raw *c)
{
	struct lc_item it = {.key_len = UINT32_MAX};
	struct lc_sqe q;

	it.key_off = raw_put(c, "k", 1);
	q = raw_item_sqe(c, LC_OP_GET_SIZE, &it);
	raw_submit(c, &q);
}

static void act_key_off_overflow(struct raw *c)
{
	struct lc_item it = {.key_off = UINT64_MAX - 2, .key_len = 8};
	struct lc_sqe q = raw_item_sqe(c, LC_OP_REMOVE, &it);

	raw_submit(c, &q);
}

static void act_key_in_header(struct raw *c)
{
	struct lc_item it = {.key_off = c->h.ring_off, .key_len = 16};
	struct lc_sqe q = raw_item_sqe(c, LC_OP_EXISTS, &it);

	raw_submit(c, &q);
}

static void act_slot_out_of_range(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = c->h.slot_count};

	raw_submit(c, &q);
}

static void act_slot_huge(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = UINT32_MAX};

	raw_submit(c, &q);
}

static void act_unknown_op(struct raw *c)
{
	struct lc_sqe q = {.op = 0xffff, .slot = 1};

	raw_submit(c, &q);
}

static void act_seg_list_in_header(struct raw *c)
{
	struct lc_item it = {.key_len = 1, .nseg = 1, .seg_off = 0};
	struct lc_sqe q;

	it.key_off = raw_put(c, "k", 1);
	q = raw_item_sqe(c, LC_OP_PUT, &it);
	raw_submit(c, &q);
}

static void act_seg_list_past_end(struct raw *c)
{
	struct lc_item it = {.key_len = 1, .nseg = 2};
	struct lc_sqe q;

	it.key_off = raw_put(c, "k", 1);
	it.seg_off = c->size - sizeof(struct lc_seg); /* the second runs off the end */
	q = raw_item_sqe(c, LC_OP_GET, &it);
	raw_submit(c, &q);
}

static void act_nseg_huge(struct raw *c)
{
	struct lc_item it = {.key_len = 1, .nseg = UINT32_MAX};
	struct lc_sqe q;

	it.key_off = raw_put(c, "k", 1);
	it.seg_off = c->h.arena_off + 4096;
	q = raw_item_sqe(c, LC_OP_PUT, &it);
	raw_submit(c, &q);
}

static void act_value_in_ring(struct raw *c)
{
	struct lc_seg seg = {.region = 0, .off = 0, .len = 4096}; /* the header */
	struct lc_item it = {.key_len = 1, .nseg = 1};
	struct lc_sqe q;

	it.key_off = raw_put(c, "k", 1);
	it.seg_off = raw_put(c, &seg, sizeof(seg));
	q = raw_item_sqe(c, LC_OP_GET, &it);
	raw_submit(c, &q);
}

/* A put of key "k" whose one segment is (region, arena + 8192, len). */
static void put_one_seg(struct raw *c, uint32_t region, uint64_t len)
{
	struct lc_seg seg = {.region = region, .len = len};
	struct lc_item it = {.key_len = 1, .nseg = 1};
	struct lc_sqe q;

	seg.off = c->h.arena_off + 8192;
	it.key_off = raw_put(c, "k", 1);
	it.seg_off = raw_put(c, &seg, sizeof(seg));
	q = raw_item_sqe(c, LC_OP_PUT, &it);
	raw_submit(c, &q);
}

static void act_value_len_overflow(struct raw *c)
{
	put_one_seg(c, 0, UINT64_MAX - 4095);
}

static void act_value_other_region(struct raw *c)
{
	put_one_seg(c, 12345, 16);
}

static void act_pattern_past_end(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_REMOVE_REGEX, .slot = 1, .arg_len = 64};

	q.arg_off = c->size - 8;
	raw_submit(c, &q);
}

/* A valid request, then garbage behind it in the same batch. */
static void act_good_then_bad(struct raw *c)
{
	struct lc_sqe good = {.op = LC_OP_HEALTH, .slot = 2, .seq = 3};
	struct lc_sqe bad = {.op = LC_OP_HEALTH, .slot = 2, .count = 5};
	uint32_t head;

	c->slots[2].state = LC_SLOT_PENDING;
	H_ASSERT_EQ(lc_ring_reserve(&c->prod, c->h.ring_entries, 2, &head), 0);
	c->sqes[head & (c->h.ring_entries - 1)] = good;
	c->sqes[(head + 1) & (c->h.ring_entries - 1)] = bad;
	lc_ring_commit(&c->prod, head, 2);
	raw_kick(c);
}

struct hostile {
	const char *what;
	void (*act)(struct raw *c);
};

static const struct hostile hostiles[] = {
    {"random descriptors", act_random_descriptors},
    {"prod_tail moved backwards", act_tail_backwards},
    {"prod_tail 2^31 ahead", act_tail_far_ahead},
    {"item array offset overflows", act_arg_off_overflow},
    {"item array length overflows", act_arg_len_overflow},
    {"item count 2^32-1", act_count_huge},
    {"item count 1025", act_count_over_batch},
    {"key runs past the region", act_key_past_region},
    {"key length 2^32-1", act_key_len_huge},
    {"key offset overflows", act_key_off_overflow},
    {"key in the ring control block", act_key_in_header},
    {"slot index == slot_count", act_slot_out_of_range},
    {"slot index 2^32-1", act_slot_huge},
    {"unknown operation", act_unknown_op},
    {"segment list in the header", act_seg_list_in_header},
    {"segment list past the end", act_seg_list_past_end},
    {"segment count 2^32-1", act_nseg_huge},
    {"value bytes in the header", act_value_in_ring},
    {"value length overflows", act_value_len_overflow},
    {"value in an unknown region", act_value_other_region},
    {"pattern past the end", act_pattern_past_end},
    {"valid request, then a bad one", act_good_then_bad},
};

static void test_hostile_violations_disconnect(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(hostiles) / sizeof(hostiles[0]); i++) {
		struct raw c;

		raw_open(&c, sock);
		hostiles[i].act(&c);
		expect_cut_off(&c, hostiles[i].what);
	}
	expect_b_healthy("after the violators");
}

/* Many violators at once, all cut off, none taking another down. */
static void test_hostile_violations_concurrent(void **state)
{
	enum { N = 16 };
	struct raw c[N];

	(void)state;
	for (int i = 0; i < N; i++)
		raw_open(&c[i], sock);
	for (int i = 0; i < N; i++)
		hostiles[(size_t)i % (sizeof(hostiles) / sizeof(hostiles[0]))].act(&c[i]);
	for (int i = 0; i < N; i++)
		expect_cut_off(&c[i], "(concurrent)");
	expect_b_healthy("after concurrent violators");
}

/* Requests in flight when their client vanishes: sockets, mapping and all.
 * First the tightest case: a hang-up and then a wake-up of the same session,
 * both pending when the proxy next looks (one epoll batch may hold both). */
static void test_hostile_abrupt_close_mid_request(void **state)
{
	(void)state;
	for (int i = 0; i < 64; i++) {
		struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = 0, .seq = 1};
		struct raw c;

		raw_open(&c, sock);
		c.slots[0].state = LC_SLOT_PENDING;
		memcpy(&c.sqes[0], &q, sizeof(q));
		lc_ring_commit(&c.prod, 0, 1);
		close(c.sock);
		c.sock = -1;
		raw_kick(&c);
		raw_close(&c);
	}
	H_ASSERT_MSG(h_alive(proxy), "the proxy died when clients hung up right after a wake-up");
	for (int i = 0; i < 8; i++) {
		struct lc_seg seg = {.region = 0, .len = 512 * 1024};
		struct lc_item it = {.nseg = 1};
		struct lc_sqe q;
		struct raw c;
		char key[32];

		raw_open(&c, sock);
		snprintf(key, sizeof(key), "hostile/abrupt/%d", i);
		it.key_len = (uint32_t)strlen(key);
		it.key_off = raw_put(&c, key, it.key_len);
		seg.off = c.h.arena_off + 65536;
		h_fill(c.base + seg.off, seg.len, h_seed(key));
		it.seg_off = raw_put(&c, &seg, sizeof(seg));
		q = raw_item_sqe(&c, i % 2 ? LC_OP_GET : LC_OP_PUT, &it);
		c.slots[1].state = LC_SLOT_PENDING;
		raw_submit(&c, &q);
		if (i % 4 == 3)
			h_sleep_ms(1); /* sometimes while a worker is on it */
		raw_close(&c);
	}
	H_ASSERT(h_alive(proxy));
	expect_new_client_served();
	expect_b_healthy("after abrupt closes");
}

/* After the handshake a client may only send registration messages; junk
 * of a message's size is a violation at once. */
static void test_hostile_socket_garbage(void **state)
{
	char junk[2 * sizeof(struct lc_reg_req)];
	struct raw c;

	(void)state;
	memset(junk, 'G', sizeof(junk));
	raw_open(&c, sock);
	H_ASSERT(send(c.sock, junk, sizeof(junk), MSG_NOSIGNAL) == (ssize_t)sizeof(junk));
	expect_cut_off(&c, "junk on the socket after hello");
	expect_b_healthy("after socket garbage");
}

/* Clients that connect and then say nothing (or half a hello) must not hold
 * up the proxy's other clients while it waits for their hello. */
static void test_hostile_silent_handshake_does_not_stall(void **state)
{
	struct lc_hello half = {.magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION};
	int fds[3];

	(void)state;
	h_sleep_ms(100);
	b_reset_max();
	for (int i = 0; i < 3; i++) {
		fds[i] = lc_uds_connect(sock, 0);
		H_ASSERT(fds[i] >= 0);
	}
	H_ASSERT_EQ(lc_uds_send(fds[2], &half, 20, NULL, 0), 0);
	for (int i = 0; i < 3; i++) {
		H_ASSERT_MSG(hung_up(fds[i], 10000), "a silent connector was never dropped");
		close(fds[i]);
	}
	/* A call of B's held up by them ends only now. */
	expect_b_unstalled("after 3 silent connectors",
			   "while the proxy waited for silent clients' hellos");
}

LUNAR_TEST_MAIN(setup, teardown, test_hostile_violations_disconnect,
		test_hostile_violations_concurrent, test_hostile_abrupt_close_mid_request,
		test_hostile_socket_garbage, test_hostile_silent_handshake_does_not_stall,
		test_hostile_aftermath)
