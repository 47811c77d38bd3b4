/*
 * test_rdma_device.c - real RDMA transfers between two engines on this
 * host, when ibv_get_device_list finds a device with an active port (a
 * NIC, or soft-RoCE: rdma link add rxe0 type rxe netdev lo); else it prints
 * "skipped: no RDMA device" and exits 77. Bytes written and read back over
 * RDMA between registered memory and the peer's segment, byte-exact and
 * counted as rdma; a range past the peer's segment fails before a byte
 * moves; an owner that goes away mid-stream makes transfers fail with
 * TRANSFER_FAIL, never succeed with wrong bytes; a forced handshake
 * refusal falls back to TCP. Keyed, the owner moves the bytes through the
 * memory windows the client binds for each transfer, a grant for another
 * range moves none, and after the owner's fence the next transfer sets up
 * a new set. Keyless, a QP set serves the owner's mount it
 * was set up under and ends with the owner's fence: after a re-mount, also
 * one that keeps the mount, the next transfer sets up a new set, and one
 * of the old mount is refused. Fences over and over under a stream of
 * reads, keyless and keyed, cost none of them its result.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "engine/rdma_int.h"
#include "lunar.h"
#include "test_engine_util.h"

#define SEG_SIZE (64u << 20)
#define LEN	 (9u << 20)

static struct auth_key key;
static unsigned char secret[AUTH_KEY_BYTES];

/* An engine on a segment of its own, registered; keyed: with the cluster
 * key and the segment secret. */
static int node_start_keyed(struct node *n, int keyed)
{
	struct eng_config cfg = {.host = "127.0.0.1",
				 .seg_size = SEG_SIZE,
				 .io_timeout_ms = 10000,
				 .rdma_devices = "auto",
				 .cluster_key = keyed ? &key : NULL};

	int rc;

	n->seg = aligned_alloc(4096, SEG_SIZE);
	memset(n->seg, 0, SEG_SIZE);
	cfg.seg_base = n->seg;
	rc = eng_engine_create(&cfg, &n->e);
	/* The segment is registered beside serving: wait for it (10 s). */
	for (int i = 0; !rc && n->e->rdma &&
			eng_rdma_seg_state(n->e->rdma->dev) == ENG_SEG_PENDING && i < 1000;
	     i++)
		usleep(10000);
	if (!rc && keyed)
		rc = eng_engine_set_secret(n->e, eng_engine_endpoint(n->e), secret);
	return rc;
}

static int node_start(struct node *n)
{
	return node_start_keyed(n, 0);
}

/* a registers buf and back (LEN bytes each) into m[0], m[1], and buf is
 * filled from seed. */
static void regions_add(struct node *a, unsigned char *buf, unsigned char *back, unsigned seed,
			struct eng_mem *m[2])
{
	m[0] = eng_mem_add(a->e, buf, LEN);
	m[1] = eng_mem_add(a->e, back, LEN);
	assert_non_null(m[0]);
	assert_non_null(m[1]);
	for (size_t i = 0; i < LEN; i++)
		buf[i] = (unsigned char)rand_r(&seed);
}

/* Undo regions_add, stop b (unless NULL) and a, free buf and back. */
static void pair_stop(struct node *a, struct node *b, struct eng_mem *m[2], unsigned char *buf,
		      unsigned char *back)
{
	eng_mem_del(m[0]);
	eng_mem_del(m[1]);
	if (b)
		node_stop(b);
	node_stop(a);
	free(buf);
	free(back);
}

static void test_rdma_device_round_trip(void **state)
{
	struct node a, b;
	unsigned char *buf = aligned_alloc(4096, LEN), *back = aligned_alloc(4096, LEN);
	struct eng_mem *m[2];
	struct eng_xfer_stats st;
	struct iovec v = {buf, LEN}, w = {back, LEN};

	(void)state;
	assert_int_equal(node_start(&a), 0);
	assert_int_equal(node_start(&b), 0);
	regions_add(&a, buf, back, 1, m);
	assert_int_equal(
	    eng_xfer(a.e, eng_engine_endpoint(b.e), ENG_WRITE, 4096, &v, 1, NULL, NULL), 0);
	assert_memory_equal(b.seg + 4096, buf, LEN);
	assert_int_equal(eng_xfer(a.e, eng_engine_endpoint(b.e), ENG_READ, 4096, &w, 1, NULL, NULL),
			 0);
	assert_memory_equal(back, buf, LEN);
	eng_engine_xfer_stats(a.e, ENG_TR_RDMA, &st);
	printf("rdma: %llu transfers, %llu bytes\n", (unsigned long long)st.xfers,
	       (unsigned long long)st.bytes);
	assert_int_equal(st.xfers, 2);
	assert_int_equal(st.bytes, 2ull * LEN);
	/* Past the peer's segment: refused before a byte moves. */
	assert_int_equal(
	    eng_xfer(a.e, eng_engine_endpoint(b.e), ENG_READ, SEG_SIZE - 10, &w, 1, NULL, NULL),
	    LUNAR_ERR_TRANSFER_FAIL);
	/* The owner goes away: transfers fail, never succeed with other bytes,
	 * and as its lifeline closes, not at their deadline (10 s). */
	{
		char ep[64];
		uint64_t t0;
		int rc;

		snprintf(ep, sizeof(ep), "%s", eng_engine_endpoint(b.e));
		node_stop(&b); /* its QPs are destroyed: ours see errors or flushes */
		t0 = lc_now_ms();
		rc = eng_xfer(a.e, ep, ENG_READ, 4096, &w, 1, NULL, NULL);
		printf("a read from an owner gone: %d after %llu ms\n", rc,
		       (unsigned long long)(lc_now_ms() - t0));
		assert_true(rc == LUNAR_ERR_TRANSFER_FAIL || rc == ENG_XFER_UNSENT);
		assert_true(lc_now_ms() - t0 < 5000);
	}
	pair_stop(&a, NULL, m, buf, back);
}

static void test_rdma_device_keyed_windows(void **state)
{
	unsigned char *buf = aligned_alloc(4096, LEN), *back = aligned_alloc(4096, LEN);
	struct iovec v = {buf, LEN}, w = {back, LEN};
	uint64_t exp = lc_now_ms() + 60000;
	struct eng_mem *m[2];
	struct eng_xfer_stats st;
	struct eng_cap wc, rc, other;
	struct node a, b;
	const char *ep;

	(void)state;
	keys_make(&key, secret);
	assert_int_equal(node_start_keyed(&a, 1), 0);
	assert_int_equal(node_start_keyed(&b, 1), 0);
	if (!a.e->rdma) { /* the engine said why at start */
		printf("skipped: the device binds no type 2 memory windows (keyed: TCP)\n");
		node_stop(&a);
		node_stop(&b);
		free(buf);
		free(back);
		skip();
	}
	ep = eng_engine_endpoint(b.e);
	wc = grant(secret, ep, ENG_OP_WRITE, 4096, LEN, 1, exp);
	rc = grant(secret, ep, ENG_OP_READ, 4096, LEN, 1, exp);
	other = grant(secret, ep, ENG_OP_READ, 0, LEN, 1, exp);
	regions_add(&a, buf, back, 2, m);
	assert_int_equal(eng_xfer(a.e, ep, ENG_WRITE, 4096, &v, 1, &wc, NULL), 0);
	assert_memory_equal(b.seg + 4096, buf, LEN);
	assert_int_equal(eng_xfer(a.e, ep, ENG_READ, 4096, &w, 1, &rc, NULL), 0);
	assert_memory_equal(back, buf, LEN);
	eng_engine_xfer_stats(a.e, ENG_TR_RDMA, &st);
	assert_int_equal(st.xfers, 2);
	/* A grant for another range: refused by the owner (UNAUTHORIZED, as
	 * over TCP), nothing moved. */
	memset(back, 0, LEN);
	assert_int_equal(eng_xfer(a.e, ep, ENG_READ, 4096, &w, 1, &other, NULL),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(back[0], 0);
	assert_int_equal(eng_xfer(a.e, ep, ENG_READ, 4096, &w, 1, &rc, NULL), 0);
	assert_memory_equal(back, buf, LEN);
	/* The owner re-mounts: its fence ends the set, and the next transfer
	 * sets up a new one rather than fail on it. */
	assert_int_equal(eng_engine_fence(b.e), 0);
	assert_int_equal(eng_engine_set_secret(b.e, ep, secret), 0);
	memset(back, 0, LEN);
	assert_int_equal(eng_xfer(a.e, ep, ENG_READ, 4096, &w, 1, &rc, NULL), 0);
	assert_memory_equal(back, buf, LEN);
	eng_engine_xfer_stats(a.e, ENG_TR_RDMA, &st);
	assert_int_equal(st.xfers, 5);
	pair_stop(&a, &b, m, buf, back);
}

/* The transfer counts of a's transport t. */
static uint64_t xfers_on(const struct node *a, enum eng_transport t)
{
	struct eng_xfer_stats st;

	eng_engine_xfer_stats(a->e, t, &st);
	return st.xfers;
}

static void test_rdma_device_keyless_mounts(void **state)
{
	unsigned char *buf = aligned_alloc(4096, LEN), *back = aligned_alloc(4096, LEN);
	struct iovec v = {buf, LEN}, w = {back, LEN};
	struct eng_cap old = {.mount = 7}, cur = {.mount = 9};
	struct eng_mem *m[2];
	struct node a, b;
	const char *ep;

	(void)state;
	assert_int_equal(node_start(&a), 0);
	assert_int_equal(node_start(&b), 0);
	ep = eng_engine_endpoint(b.e);
	regions_add(&a, buf, back, 3, m);
	eng_engine_set_mount(b.e, 7);
	assert_int_equal(eng_xfer(a.e, ep, ENG_WRITE, 0, &v, 1, &old, NULL), 0);
	assert_int_equal(xfers_on(&a, ENG_TR_RDMA), 1);
	/* The owner re-mounts: its fence ends a's set, and the next transfer
	 * sets up one under the new mount. */
	assert_int_equal(eng_engine_fence(b.e), 0);
	eng_engine_set_mount(b.e, 9);
	memset(back, 0, LEN);
	assert_int_equal(eng_xfer(a.e, ep, ENG_READ, 0, &w, 1, &cur, NULL), 0);
	assert_memory_equal(back, buf, LEN);
	assert_int_equal(xfers_on(&a, ENG_TR_RDMA), 2);
	/* A write of the old mount: refused over TCP. */
	buf[0] ^= 0xff;
	assert_int_equal(eng_xfer(a.e, ep, ENG_WRITE, 0, &v, 1, &old, NULL),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_not_equal(b.seg[0], buf[0]);
	assert_int_equal(xfers_on(&a, ENG_TR_TCP), 1);
	/* A re-mount that keeps the mount ends the set too: the next
	 * transfer takes a new one, not the dead one. */
	assert_int_equal(eng_engine_fence(b.e), 0);
	eng_engine_set_mount(b.e, 9);
	assert_int_equal(eng_xfer(a.e, ep, ENG_WRITE, 0, &v, 1, &cur, NULL), 0);
	assert_memory_equal(b.seg, buf, LEN);
	assert_int_equal(xfers_on(&a, ENG_TR_RDMA), 3);
	assert_int_equal(xfers_on(&a, ENG_TR_TCP), 1);
	pair_stop(&a, &b, m, buf, back);
}

/* Reads of [0, LEN) of b's segment into back, back to back until stop. */
struct reader {
	struct node *a;
	const char *ep;
	const struct eng_cap *cap;
	unsigned char *back;
	const unsigned char *want;
	atomic_int stop, done, failed, wrong;
	atomic_ullong last_us; /* how long the last read took */
};

static void *reader_run(void *arg)
{
	struct reader *r = arg;
	struct iovec w = {r->back, LEN};

	while (!atomic_load(&r->stop)) {
		uint64_t t0;

		memset(r->back, 0, LEN);
		t0 = lc_now_ns() / 1000;
		if (eng_xfer(r->a->e, r->ep, ENG_READ, 0, &w, 1, r->cap, NULL))
			atomic_fetch_add(&r->failed, 1);
		else if (memcmp(r->back, r->want, LEN))
			atomic_fetch_add(&r->wrong, 1);
		atomic_store(&r->last_us, lc_now_ns() / 1000 - t0);
		atomic_fetch_add(&r->done, 1);
	}
	return NULL;
}

/* The owner fences (a re-mount that keeps its mount, and its grants) over
 * and over while a reads: a fence that ends a's set under an RDMA
 * transfer, or just before it and unseen yet, costs that transfer a second
 * run, not its result: no RDMA transfer fails, and no read has other
 * bytes. (The second run's connect may come between the fence and the
 * re-mount: refused, it goes over TCP, the next ones too for a second, and
 * a fence under a TCP transfer fails it, as ever.) Keyed, the owner's
 * moving of the bytes ends with the fence, which does not wait for it to
 * time out. Each fence comes halfway through the read after the last
 * one's (by the last read's time). */
static void fences_under_reads(int keyed)
{
	unsigned char *buf = aligned_alloc(4096, LEN), *back = aligned_alloc(4096, LEN);
	struct eng_cap cap = {.mount = 9};
	struct eng_mem *m[2];
	struct node a, b;
	struct reader r = {.a = &a, .cap = &cap, .back = back, .want = buf};
	uint64_t t0, slowest = 0;
	struct eng_xfer_stats st;
	pthread_t t;

	assert_int_equal(node_start_keyed(&a, keyed), 0);
	assert_int_equal(node_start_keyed(&b, keyed), 0);
	r.ep = eng_engine_endpoint(b.e);
	if (keyed)
		cap = grant(secret, r.ep, ENG_OP_READ, 0, LEN, 1, lc_now_ms() + 60000);
	else
		eng_engine_set_mount(b.e, 9);
	regions_add(&a, buf, back, 4, m);
	memcpy(b.seg, buf, LEN);
	assert_int_equal(pthread_create(&t, NULL, reader_run, &r), 0);
	while (atomic_load(&r.done) < 3)
		usleep(1000);
	for (int i = 0; i < 8; i++) {
		int seen = atomic_load(&r.done);

		while (atomic_load(&r.done) == seen)
			usleep(1000);
		usleep((useconds_t)(atomic_load(&r.last_us) / 2));
		t0 = lc_now_ms();
		assert_int_equal(eng_engine_fence(b.e), 0);
		if (lc_now_ms() - t0 > slowest)
			slowest = lc_now_ms() - t0;
		if (keyed)
			assert_int_equal(eng_engine_set_secret(b.e, r.ep, secret), 0);
		else
			eng_engine_set_mount(b.e, 9);
	}
	atomic_store(&r.stop, 1);
	pthread_join(t, NULL);
	eng_engine_xfer_stats(a.e, ENG_TR_RDMA, &st);
	printf("%s: %d reads under 8 fences (the slowest %llu ms), %d failed, %d wrong; "
	       "rdma %llu (%llu failed), tcp %llu\n",
	       keyed ? "keyed" : "keyless", atomic_load(&r.done), (unsigned long long)slowest,
	       atomic_load(&r.failed), atomic_load(&r.wrong), (unsigned long long)st.xfers,
	       (unsigned long long)st.failures, (unsigned long long)xfers_on(&a, ENG_TR_TCP));
	assert_true(st.xfers > 0);
	assert_int_equal(st.failures, 0);
	assert_int_equal(atomic_load(&r.wrong), 0);
	/* The owner's transfer under way ends with the fence, not at its
	 * deadline (the 10 s timeout). */
	assert_true(slowest < 5000);
	pair_stop(&a, &b, m, buf, back);
}

static void test_rdma_device_fences_under_keyless_reads(void **state)
{
	(void)state;
	fences_under_reads(0);
}

static void test_rdma_device_fences_under_keyed_reads(void **state)
{
	(void)state;
	fences_under_reads(1);
}

static void test_rdma_device_forced_refusal(void **state)
{
	struct node a, b;
	unsigned char *buf = aligned_alloc(4096, 4096);
	struct eng_mem *m;
	struct iovec v = {buf, 4096};
	struct eng_xfer_stats st;

	(void)state;
	assert_int_equal(node_start(&a), 0);
	setenv("LUNAR_RDMA_DEBUG_REFUSE", "1", 1);
	assert_int_equal(node_start(&b), 0);
	unsetenv("LUNAR_RDMA_DEBUG_REFUSE");
	m = eng_mem_add(a.e, buf, 4096);
	memset(buf, 7, 4096);
	assert_int_equal(eng_xfer(a.e, eng_engine_endpoint(b.e), ENG_WRITE, 0, &v, 1, NULL, NULL),
			 0);
	assert_memory_equal(b.seg, buf, 4096);
	eng_engine_xfer_stats(a.e, ENG_TR_TCP, &st);
	assert_int_equal(st.xfers, 1);
	assert_int_equal(eng_engine_rdma_fallbacks(a.e), 1);
	eng_mem_del(m);
	node_stop(&b);
	node_stop(&a);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rdma_device_round_trip),
	    cmocka_unit_test(test_rdma_device_keyed_windows),
	    cmocka_unit_test(test_rdma_device_keyless_mounts),
	    cmocka_unit_test(test_rdma_device_fences_under_keyless_reads),
	    cmocka_unit_test(test_rdma_device_fences_under_keyed_reads),
	    cmocka_unit_test(test_rdma_device_forced_refusal),
	};
	struct node probe;
	int has;

	if (node_start(&probe))
		return 1;
	has = eng_engine_rdma_device(probe.e) != NULL;
	node_stop(&probe);
	if (!has) {
		printf("skipped: no RDMA device\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
