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
 * in the proxy shows only there.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "atomic.h"
#include "harness.h"
#include "harness_raw.h"
#include "ring.h"
#include "shm_abi.h"
#include "uds.h"

#define HANGUP_MS  2000 /* a violator must be cut off within this */
#define B_STALL_MS 1000 /* longest B call tolerated while others misbehave */
#define B_MAX_LEN  (64u * 1024u)
#define FD_SLACK   2

static char sock[PATH_MAX];
static struct h_proc *proxy;
static int fd_baseline;

/* --- client B: a normal handle in a thread, never calling cmocka --- */

struct bstate {
	pthread_t th;
	struct lunar_client *c;
	atomic_bool stop;
	atomic_ullong ops;
	atomic_ullong errors;
	atomic_ullong max_ms; /* longest call since the last reset */
	char first_err[160];
};

static struct bstate b;

static void b_fail(uint64_t i, const char *what, int64_t rc)
{
	if (atomic_fetch_add(&b.errors, 1) == 0)
		snprintf(b.first_err, sizeof(b.first_err), "round %llu: %s returned %lld (%s)",
			 (unsigned long long)i, what, (long long)rc, h_code(rc));
}

static void b_timed(uint64_t start)
{
	unsigned long long ms = h_now_ms() - start, cur = atomic_load(&b.max_ms);

	while (ms > cur && !atomic_compare_exchange_weak(&b.max_ms, &cur, ms))
		;
}

static void *b_main(void *arg)
{
	uint8_t *buf = malloc(B_MAX_LEN), *out = malloc(B_MAX_LEN);
	char key[64];
	int64_t rc;

	(void)arg;
	for (uint64_t i = 0; buf && out && !atomic_load(&b.stop); i++) {
		size_t len = 1 + (size_t)((i * 7919u) % B_MAX_LEN);
		uint64_t t;

		snprintf(key, sizeof(key), "hostile-B/%llu", (unsigned long long)i);
		h_fill(buf, len, h_seed(key));
		t = h_now_ms();
		rc = lunar_put(b.c, key, buf, len, NULL);
		b_timed(t);
		if (rc) {
			b_fail(i, "put", rc);
			continue;
		}
		t = h_now_ms();
		rc = lunar_get_into(b.c, key, out, B_MAX_LEN);
		b_timed(t);
		if (rc != (int64_t)len)
			b_fail(i, "get_into", rc);
		else if (h_verify(out, len, h_seed(key)) >= 0)
			b_fail(i, "verify", 0);
		t = h_now_ms();
		rc = lunar_remove(b.c, key, 1);
		b_timed(t);
		if (rc)
			b_fail(i, "remove", rc);
		atomic_fetch_add(&b.ops, 1);
	}
	free(buf);
	free(out);
	return NULL;
}

/* A well-formed one-item request (key "k", nseg segments at seg_off). */
static struct lc_sqe raw_item_sqe(struct raw *c, uint16_t op, struct lc_item *it)
{
	struct lc_sqe q = {.op = op, .slot = 1, .count = 1, .seq = 7};

	q.arg_len = sizeof(*it);
	q.arg_off = raw_put(c, it, sizeof(*it));
	return q;
}

/* 1 once the proxy closed its end (EOF or reset), 0 after ms without. */
static int hung_up(int fd, int ms)
{
	uint64_t end = h_now_ms() + (uint64_t)ms;
	char buf[64];

	for (;;) {
		struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
		int64_t left = (int64_t)(end - h_now_ms());
		ssize_t n;

		if (left < 0)
			return 0;
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return 1;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return 1;
	}
}

/* The proxy log's reason line for client id, waiting up to ms; "" if none. */
static const char *log_reason(uint64_t id, int ms)
{
	static char reason[256];
	char needle[48], line[1024];
	uint64_t end = h_now_ms() + (uint64_t)ms;

	snprintf(needle, sizeof(needle), "client %llu ", (unsigned long long)id);
	do {
		FILE *f = fopen(proxy->log, "r");

		while (f && fgets(line, sizeof(line), f)) {
			char *d = strstr(line, "disconnected:");

			if (d && strstr(line, needle)) {
				snprintf(reason, sizeof(reason), "%s", d);
				reason[strcspn(reason, "\n")] = '\0';
				fclose(f);
				return reason;
			}
		}
		if (f)
			fclose(f);
		h_sleep_ms(20);
	} while (h_now_ms() < end);
	return "";
}

static void expect_cut_off(struct raw *c, const char *what)
{
	const char *why;

	H_ASSERT_MSG(hung_up(c->sock, HANGUP_MS), "%s: client %llu not disconnected within %d ms",
		     what, (unsigned long long)c->client_id, HANGUP_MS);
	why = log_reason(c->client_id, 1000);
	H_ASSERT_MSG(*why, "%s: no \"disconnected:\" line for client %llu in the proxy log", what,
		     (unsigned long long)c->client_id);
	printf("  %-34s -> %s\n", what, why);
	H_ASSERT(h_alive(proxy));
	raw_close(c);
}

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

static void act_value_len_overflow(struct raw *c)
{
	struct lc_seg seg = {.region = 0, .len = UINT64_MAX - 4095};
	struct lc_item it = {.key_len = 1, .nseg = 1};
	struct lc_sqe q;

	seg.off = c->h.arena_off + 8192;
	it.key_off = raw_put(c, "k", 1);
	it.seg_off = raw_put(c, &seg, sizeof(seg));
	q = raw_item_sqe(c, LC_OP_PUT, &it);
	raw_submit(c, &q);
}

static void act_value_other_region(struct raw *c)
{
	struct lc_seg seg = {.region = 12345, .len = 16};
	struct lc_item it = {.key_len = 1, .nseg = 1};
	struct lc_sqe q;

	seg.off = c->h.arena_off + 8192;
	it.key_off = raw_put(c, "k", 1);
	it.seg_off = raw_put(c, &seg, sizeof(seg));
	q = raw_item_sqe(c, LC_OP_PUT, &it);
	raw_submit(c, &q);
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

/* --- fixtures and checks --- */

static uint64_t b_reset_max(void)
{
	return atomic_exchange(&b.max_ms, 0);
}

static void expect_b_healthy(const char *when)
{
	uint64_t ops = atomic_load(&b.ops), end = h_now_ms() + 5000;

	/* B is still making progress... */
	while (atomic_load(&b.ops) == ops && h_now_ms() < end)
		h_sleep_ms(5);
	H_ASSERT_MSG(atomic_load(&b.ops) > ops, "%s: client B made no progress for 5 s", when);
	/* ...and has not failed. */
	H_ASSERT_MSG(atomic_load(&b.errors) == 0, "%s: client B saw %llu errors, first: %s", when,
		     (unsigned long long)atomic_load(&b.errors), b.first_err);
}

static void expect_new_client_served(void)
{
	struct lunar_client *c = h_client(sock);

	H_ASSERT_EQ(lunar_health(c), 0);
	H_ASSERT_EQ(lunar_put(c, "hostile/new", "v", 1, NULL), 0);
	H_ASSERT_EQ(lunar_exists(c, "hostile/new"), 1);
	H_ASSERT_EQ(lunar_remove(c, "hostile/new", 1), 0);
	lunar_close(c);
}

static int setup(void **state)
{
	(void)state;
	proxy = h_embedded_node(sock, &b.c, "--segment-size", "64MiB", NULL);
	if (!proxy || pthread_create(&b.th, NULL, b_main, NULL) != 0)
		return -1;
	h_sleep_ms(200);
	fd_baseline = h_pid_fd_count(proxy->pid);
	printf("  proxy pid %d: %d descriptors with client B\n", (int)proxy->pid, fd_baseline);
	return fd_baseline > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (b.c) {
		atomic_store(&b.stop, true);
		pthread_join(b.th, NULL);
		lunar_close(b.c);
		b.c = NULL;
	}
	h_cleanup();
	return 0;
}

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

/* The ABI lets a client write the eventfd whenever it likes, so a flood is
 * not a violation; it must simply not stall the proxy or its other clients. */
static void test_hostile_eventfd_flood(void **state)
{
	uint64_t ops = atomic_load(&b.ops), end, v, writes = 0, stall;
	struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = 5, .seq = 55};
	struct raw c;

	(void)state;
	raw_open(&c, sock);
	b_reset_max();
	end = h_now_ms() + 1500;
	while (h_now_ms() < end) {
		v = writes % 1000 == 0 ? UINT64_MAX - 1 : 1; /* the counter's maximum, too */
		if (write(c.efd, &v, sizeof(v)) == sizeof(v))
			writes++;
		else
			H_ASSERT_MSG(errno == EAGAIN, "eventfd write: %s", strerror(errno));
	}
	stall = b_reset_max();
	printf("  %llu eventfd writes in 1.5 s; B: %llu rounds, longest call %llu ms\n",
	       (unsigned long long)writes, (unsigned long long)(atomic_load(&b.ops) - ops),
	       (unsigned long long)stall);
	H_ASSERT_MSG(stall < B_STALL_MS, "B stalled %llu ms during the flood",
		     (unsigned long long)stall);
	/* Still a working session afterwards. */
	c.slots[5].state = LC_SLOT_PENDING;
	raw_submit(&c, &q);
	H_ASSERT_MSG(raw_wait_done(&c, 5, 5000), "flooder's own request never completed");
	H_ASSERT_EQ(c.slots[5].result, 0);
	H_ASSERT_EQ(c.slots[5].seq, 55);
	H_ASSERT(!hung_up(c.sock, 100));
	raw_close(&c);
	expect_b_healthy("after the eventfd flood");
}

/* 1 while the proxy's loop (its main thread) sits in read(2). */
static int loop_in_read(void)
{
	char path[64], line[128] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)proxy->pid);
	f = fopen(path, "r");
	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = '\0';
		fclose(f);
	}
	/* "running", or the number of the system call it is blocked in */
	return line[0] >= '0' && line[0] <= '9' && strtol(line, NULL, 10) == SYS_read;
}

static atomic_bool drain_stop;

/* Reads the eventfd the client made blocking, racing the proxy for it. */
static void *drain_main(void *arg)
{
	int fd = *(int *)arg;
	uint64_t v;

	while (!atomic_load(&drain_stop))
		if (read(fd, &v, sizeof(v)) < 0 && errno != EINTR)
			break;
	return NULL;
}

/*
 * The eventfd is one open file shared with the client, which may clear its
 * O_NONBLOCK and drain it between the proxy's wakeup and any read of the
 * proxy's: the loop must never block on it. Writes with pauses, stopping
 * at once if the loop is found in read(2), where it would stay until the
 * next write.
 */
static void test_hostile_blocking_eventfd(void **state)
{
	uint64_t end, v = 1, writes = 0, stall;
	int stuck = 0;
	pthread_t th;
	struct raw c;

	(void)state;
	raw_open(&c, sock);
	H_ASSERT(fcntl(c.efd, F_SETFL, fcntl(c.efd, F_GETFL) & ~O_NONBLOCK) == 0);
	atomic_store(&drain_stop, false);
	H_ASSERT(pthread_create(&th, NULL, drain_main, &c.efd) == 0);
	b_reset_max();
	end = h_now_ms() + 1500;
	while (!stuck && h_now_ms() < end) {
		H_ASSERT(write(c.efd, &v, sizeof(v)) == sizeof(v));
		writes++;
		for (int i = 0; i < 10 && !stuck; i++) {
			usleep(50);
			stuck = loop_in_read();
		}
	}
	if (stuck)
		h_sleep_ms(B_STALL_MS + 200); /* what B suffers until someone writes */
	stall = b_reset_max();
	atomic_store(&drain_stop, true);
	for (int i = 0; i < 4; i++) /* wake the drainer (and a stuck loop) */
		H_ASSERT(write(c.efd, &v, sizeof(v)) == sizeof(v));
	pthread_join(th, NULL);
	printf("  %llu eventfd writes; loop blocked in read: %s; B's longest call %llu ms\n",
	       (unsigned long long)writes, stuck ? "yes" : "no", (unsigned long long)stall);
	H_ASSERT_MSG(!stuck, "the proxy's loop blocked reading a client's eventfd");
	H_ASSERT_MSG(stall < B_STALL_MS, "B stalled %llu ms", (unsigned long long)stall);
	H_ASSERT(!hung_up(c.sock, 10));
	raw_close(&c);
	expect_b_healthy("after a blocking, drained eventfd");
}

/* A client that submits as fast as the ring takes requests and never waits
 * for one (all on one slot): the proxy bounds what it queues for it (BUSY)
 * and B's calls do not stall behind the flood. */
static void test_hostile_request_flood(void **state)
{
	struct lc_item it = {.key_len = 9};
	uint64_t end, sent = 0, busy = 0, stall;
	struct lc_sqe q;
	struct raw c;

	(void)state;
	raw_open(&c, sock);
	it.key_off = raw_put(&c, "flood/key", 9);
	q = raw_item_sqe(&c, LC_OP_EXISTS, &it);
	b_reset_max();
	end = h_now_ms() + 2000;
	while (h_now_ms() < end) {
		uint32_t head;

		if (lc_ring_reserve(&c.prod, c.h.ring_entries, 1, &head)) {
			lc_cpu_relax();
			continue;
		}
		q.seq = ++sent;
		c.sqes[head & (c.h.ring_entries - 1)] = q;
		lc_ring_commit(&c.prod, head, 1);
		if (lc_ring_need_wakeup(c.ring))
			raw_kick(&c);
		if (LC_READ_ONCE(c.slots[1].result) == LUNAR_ERR_BUSY)
			busy++;
	}
	H_ASSERT(!hung_up(c.sock, 10));
	raw_close(&c);
	expect_b_healthy("after a request flood");
	stall = b_reset_max();
	printf("  %llu requests in 2 s (BUSY seen %llu times); B's longest call %llu ms\n",
	       (unsigned long long)sent, (unsigned long long)busy, (unsigned long long)stall);
	H_ASSERT_MSG(stall < B_STALL_MS, "B stalled %llu ms behind another client's flood",
		     (unsigned long long)stall);
}

/* The memfd is sealed: a client cannot resize it under the proxy (which
 * would SIGBUS it). Then the client unmaps everything and idles. */
static void test_hostile_sealed_then_unmapped(void **state)
{
	struct raw c;
	int seals;

	(void)state;
	raw_open(&c, sock);
	seals = fcntl(c.memfd, F_GET_SEALS);
	H_ASSERT_MSG(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
				       (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
		     "seals 0x%x", seals);
	H_ASSERT_MSG(ftruncate(c.memfd, 0) < 0 && errno == EPERM, "shrinking the region worked");
	H_ASSERT_MSG(ftruncate(c.memfd, (off_t)c.size / 2) < 0 && errno == EPERM,
		     "shrinking the region worked");
	H_ASSERT_MSG(ftruncate(c.memfd, (off_t)c.size * 2) < 0 && errno == EPERM,
		     "growing the region worked");
	H_ASSERT_MSG(fcntl(c.memfd, F_ADD_SEALS, F_SEAL_WRITE) < 0, "adding a write seal worked");
	H_ASSERT_MSG(fallocate(c.memfd, 0, 0, (off_t)c.size * 2) < 0, "fallocate grew the region");
	munmap(c.base, c.size);
	c.base = NULL;
	close(c.memfd);
	c.memfd = -1;
	/* Socket and eventfd stay open; nothing is ever submitted. */
	H_ASSERT_MSG(!hung_up(c.sock, 500), "an idle client was disconnected");
	expect_new_client_served();
	expect_b_healthy("with an unmapped idle client");
	raw_close(&c);
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

/* One registration round trip: the reply's code, or -errno on hang-up. */
static int raw_register(struct raw *c, const struct lc_reg_req *q, int fd, uint32_t *region)
{
	struct lc_reg_rep rep;
	int n;

	n = lc_uds_send(c->sock, q, sizeof(*q), &fd, fd >= 0);
	if (n)
		return n;
	n = lc_uds_recv(c->sock, &rep, sizeof(rep), NULL, 0, HANGUP_MS);
	if (n < 0)
		return n;
	H_ASSERT_EQ(rep.magic, LC_REG_MAGIC);
	H_ASSERT_EQ(rep.cookie, q->cookie);
	*region = rep.region;
	return rep.code;
}

/* A memfd the proxy would map: sealed against shrinking unless told not. */
static int memfd_of(uint64_t size, int seal)
{
	int fd = memfd_create("hostile-reg", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	H_ASSERT(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
	if (seal)
		H_ASSERT(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
	return fd;
}

/* A message carrying more descriptors than any message of the protocol
 * (the kernel drops those past the proxy's control buffer): cut off. */
static void test_hostile_too_many_descriptors(void **state)
{
	enum { N = LC_UDS_MAX_FDS + 2 };
	struct lc_reg_req q = {
	    .magic = LC_REG_MAGIC, .op = LC_REG_ADD, .length = 1 << 16, .cookie = 8};
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * N)];
	} ctl;
	struct iovec iov = {&q, sizeof(q)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	int fd = memfd_of(1 << 16, 1);
	struct raw c;

	(void)state;
	raw_open(&c, sock);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * N);
	for (int i = 0; i < N; i++)
		memcpy(CMSG_DATA(cm) + i * sizeof(int), &fd, sizeof(int));
	H_ASSERT(sendmsg(c.sock, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof(q));
	close(fd);
	expect_cut_off(&c, "too many descriptors");
	expect_b_healthy("after too many descriptors");
}

/* Submit a one-item request whose only segment is seg; expect the cut-off. */
static void submit_seg(struct raw *c, uint16_t op, const struct lc_seg *seg, const char *what)
{
	struct lc_item it = {.key_len = 1, .nseg = 1};
	struct lc_sqe q;

	it.key_off = raw_put(c, "k", 1);
	it.seg_off = raw_put(c, seg, sizeof(*seg));
	q = raw_item_sqe(c, op, &it);
	raw_submit(c, &q);
	expect_cut_off(c, what);
}

/*
 * Registered memory: a range the proxy could lose under it (an unsealed
 * memfd, one shorter than the range) is refused with a code and the session
 * goes on; segments naming a region never granted, one already deleted, or
 * running past a granted one are violations.
 */
static void test_hostile_registrations(void **state)
{
	struct lc_reg_req q = {.magic = LC_REG_MAGIC, .op = LC_REG_ADD, .cookie = 1};
	struct lc_seg seg = {.len = 8};
	uint32_t region = 0;
	struct raw c;
	int fd, rc;

	(void)state;
	raw_open(&c, sock);
	fd = memfd_of(1 << 20, 0);
	q.length = 1 << 20;
	rc = raw_register(&c, &q, fd, &region);
	H_ASSERT_MSG(rc < 0, "an unsealed memfd was registered (region %u)", region);
	close(fd);

	fd = memfd_of(1 << 20, 1);
	q.offset = 4096;
	q.length = 1 << 20; /* past the end by a page */
	rc = raw_register(&c, &q, fd, &region);
	H_ASSERT_MSG(rc < 0, "a range past the memfd's end was registered");
	q.offset = 1;
	q.length = 4096;
	rc = raw_register(&c, &q, fd, &region);
	H_ASSERT_MSG(rc < 0, "an unaligned offset was registered");
	q.offset = 0;
	q.length = UINT64_MAX;
	rc = raw_register(&c, &q, fd, &region);
	H_ASSERT_MSG(rc < 0, "a 2^64-1-byte range was registered");
	q.op = LC_REG_DEL;
	q.region = 77;
	q.length = 0;
	rc = raw_register(&c, &q, -1, &region);
	H_ASSERT_MSG(rc < 0, "deleting a region never granted worked");
	/* A good one at last: the refusals left the session in business. */
	q.op = LC_REG_ADD;
	q.region = 0;
	q.length = 1 << 20;
	H_ASSERT_EQ(raw_register(&c, &q, fd, &region), 0);
	H_ASSERT(region >= 1 && region <= LC_MAX_REGIONS);
	close(fd);
	H_ASSERT(!hung_up(c.sock, 50));
	seg.region = region;
	seg.off = (1 << 20) - 7;
	submit_seg(&c, LC_OP_GET, &seg, "value past a registered range");

	raw_open(&c, sock);
	seg.region = LC_MAX_REGIONS;
	seg.off = 0;
	submit_seg(&c, LC_OP_PUT, &seg, "value in a region never granted");

	raw_open(&c, sock);
	fd = memfd_of(1 << 16, 1);
	q = (struct lc_reg_req){.magic = LC_REG_MAGIC, .op = LC_REG_ADD, .length = 1 << 16};
	H_ASSERT_EQ(raw_register(&c, &q, fd, &region), 0);
	close(fd);
	q = (struct lc_reg_req){.magic = LC_REG_MAGIC, .op = LC_REG_DEL, .region = region};
	H_ASSERT_EQ(raw_register(&c, &q, -1, &seg.region), 0);
	submit_seg(&c, LC_OP_GET, &seg, "value in a deleted region");

	raw_open(&c, sock);
	q = (struct lc_reg_req){.magic = LC_REG_MAGIC, .op = 9};
	H_ASSERT_EQ(lc_uds_send(c.sock, &q, sizeof(q), NULL, 0), 0);
	expect_cut_off(&c, "registration op 9");
	expect_b_healthy("after hostile registrations");
}

/* Clients that connect and then say nothing (or half a hello) must not hold
 * up the proxy's other clients while it waits for their hello. */
static void test_hostile_silent_handshake_does_not_stall(void **state)
{
	struct lc_hello half = {.magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION};
	int fds[3];
	uint64_t stall;

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
	expect_b_healthy("after silent connectors");
	stall = b_reset_max();
	printf("  3 silent connectors: B's longest call %llu ms\n", (unsigned long long)stall);
	H_ASSERT_MSG(stall < B_STALL_MS,
		     "B stalled %llu ms while the proxy waited for silent clients' hellos",
		     (unsigned long long)stall);
}

/* Last: B never failed, a new client works, and every descriptor the
 * hostile sessions took came back. */
static void test_hostile_aftermath(void **state)
{
	uint64_t end = h_now_ms() + 5000;
	int fds;

	(void)state;
	expect_b_healthy("at the end");
	expect_new_client_served();
	do {
		fds = h_pid_fd_count(proxy->pid);
		if (fds == fd_baseline) /* settle fully if it will; ±FD_SLACK passes */
			break;
		h_sleep_ms(50);
	} while (h_now_ms() < end);
	printf("  proxy descriptors: %d (baseline %d); B: %llu rounds, 0 errors\n", fds,
	       fd_baseline, (unsigned long long)atomic_load(&b.ops));
	H_ASSERT_MSG(abs(fds - fd_baseline) <= FD_SLACK,
		     "proxy holds %d descriptors, %d before the hostile clients", fds, fd_baseline);
	atomic_store(&b.stop, true);
	pthread_join(b.th, NULL);
	H_ASSERT_MSG(atomic_load(&b.errors) == 0, "client B saw %llu errors, first: %s",
		     (unsigned long long)atomic_load(&b.errors), b.first_err);
	lunar_close(b.c);
	b.c = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hostile_violations_disconnect),
	    cmocka_unit_test(test_hostile_violations_concurrent),
	    cmocka_unit_test(test_hostile_eventfd_flood),
	    cmocka_unit_test(test_hostile_blocking_eventfd),
	    cmocka_unit_test(test_hostile_request_flood),
	    cmocka_unit_test(test_hostile_sealed_then_unmapped),
	    cmocka_unit_test(test_hostile_abrupt_close_mid_request),
	    cmocka_unit_test(test_hostile_socket_garbage),
	    cmocka_unit_test(test_hostile_too_many_descriptors),
	    cmocka_unit_test(test_hostile_registrations),
	    cmocka_unit_test(test_hostile_silent_handshake_does_not_stall),
	    cmocka_unit_test(test_hostile_aftermath),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, setup, teardown);
}
