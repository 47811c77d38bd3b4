/*
 * test_fence.c - a client that gives up on a call (its timeout) gets
 * it back only once the proxy is done with the call's memory: the library
 * waits for the proxy to close the session, which it does when no worker
 * of that session runs any more (test_peer_stop covers a get stuck on a
 * stopped peer). Here:
 * - a request still queued behind another client's work when its client
 *   gave up is dropped with its session, not run into memory the
 *   application moved on with, and the client does not wait for it;
 * - the proxy's hang-up does not wait behind another client's slow close
 *   (the closer thread), neither for a client cut off for a violation nor
 *   for one whose call timed out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "atomic.h"
#include "harness.h"
#include "harness_raw.h"
#include "tests/cmocka_main.h"

#define BLOCK_S	    6	 /* how long the close of the blocker takes */
#define PROMPT_MS   2000 /* a hang-up must come well before BLOCK_S */
#define SHORT_MS    500	 /* the timeout of the client that gives up */
#define LONG_KEYS   600
#define LONG_KEY_AS 3990
#define LONG_BATCH  50 /* divides LONG_KEYS */
#define VLEN	    65536

static char sock[PATH_MAX];

/* An embedded node with one worker. The put delay (a test hook) holds puts
 * before their commit, and sends every request to the worker, none run on
 * the loop. */
static struct h_proc *node(const char *name, const char *put_delay)
{
	h_named_sock(sock, name);
	return h_start_proxy(name, sock, H_EMBEDDED, "--segment-size", "16MiB", "--workers", "1",
			     "--debug-put-delay", put_delay, NULL);
}

/* ms until the proxy hangs up on c, or -1 after limit_ms. */
static long hangup_ms(struct raw *c, int limit_ms)
{
	uint64_t t0 = h_now_ms();
	struct pollfd p = {c->sock, POLLIN | POLLRDHUP, 0};
	char b;

	while ((int)(h_now_ms() - t0) < limit_ms) {
		if (poll(&p, 1, limit_ms - (int)(h_now_ms() - t0)) <= 0)
			continue;
		if ((p.revents & (POLLHUP | POLLRDHUP | POLLERR)) ||
		    recv(c->sock, &b, 1, MSG_DONTWAIT) == 0)
			return (long)(h_now_ms() - t0);
	}
	return -1;
}

/* A client that breaks the ring's rules (its tail moved backwards). */
static void violate(struct raw *c)
{
	struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = 0, .seq = 1};

	c->slots[0].state = LC_SLOT_PENDING;
	raw_submit(c, &q);
	H_ASSERT(raw_wait_done(c, 0, 5000));
	/* release: pairs with the proxy's lc_load_acquire of prod_tail in common/ring.c */
	lc_store_release(&c->ring->prod_tail, 0u);
	raw_kick(c);
}

/*
 * Another client's descriptor holds the closer thread for BLOCK_S. The
 * proxy's hang-up does not wait for it: a client that breaks the rules is
 * cut off at once, and a call that timed out while the proxy held it (the
 * put hook) returns about at its timeout, its session closed.
 */
static void test_fence_hang_ups_past_a_slow_close(void **state)
{
	struct h_proc *p = node("slowclose", "3s");
	struct lunar_client *c;
	struct raw blocker, bad;
	uint64_t t0, ms;
	int peer, rc;
	long cut;

	(void)state;
	H_ASSERT(p != NULL);
	raw_open(&blocker, sock);
	raw_register_blocker(&blocker, BLOCK_S, &peer);
	h_sleep_ms(200);
	c = h_client_try(sock, SHORT_MS, NULL);
	H_ASSERT(c != NULL);
	t0 = h_now_ms();
	rc = lunar_put(c, "fence/held", "v", 1, NULL);
	ms = h_now_ms() - t0;
	print_message("timed-out put: %d (%s) after %llu ms, the closer held\n", rc, h_code(rc),
		      (unsigned long long)ms);
	H_ASSERT_EQ(rc, LUNAR_ERR_PROXY_UNAVAILABLE);
	H_ASSERT_MSG(ms < SHORT_MS + 400, "the call took %llu ms", (unsigned long long)ms);
	raw_open(&bad, sock);
	violate(&bad);
	cut = hangup_ms(&bad, 20000);
	print_message("violator cut off after %ld ms, the closer held\n", cut);
	H_ASSERT_MSG(cut >= 0 && cut < PROMPT_MS, "violator cut off after %ld ms", cut);
	raw_close(&bad);
	lunar_close(c);
	close(peer);
	raw_close(&blocker);
	h_stop(p);
}

struct slow {
	struct lunar_client *c;
	uint64_t end_ms;
};

/* Allowed (its automaton is small) yet ~9 ms per 4000-byte key. */
static void *slow_remove(void *arg)
{
	struct slow *s = arg;

	lunar_remove_by_regex(s->c, "(a{0,14}){0,14}z", 1);
	s->end_ms = h_now_ms();
	return NULL;
}

/* Put LONG_KEYS keys of LONG_KEY_AS 'a's and a number through a, a batch
 * of LONG_BATCH at a time (one held request each, not one per key). */
static void put_long_keys(struct lunar_client *a)
{
	static char keys[LONG_BATCH][LONG_KEY_AS + 16];
	const char *names[LONG_BATCH];
	struct iovec v = {.iov_base = "v", .iov_len = 1};
	const struct iovec *iovs[LONG_BATCH];
	int iovcnts[LONG_BATCH], results[LONG_BATCH];

	for (int i = 0; i < LONG_BATCH; i++) {
		memset(keys[i], 'a', LONG_KEY_AS);
		names[i] = keys[i];
		iovs[i] = &v;
		iovcnts[i] = 1;
	}
	for (int done = 0; done < LONG_KEYS; done += LONG_BATCH) {
		for (int i = 0; i < LONG_BATCH; i++)
			snprintf(keys[i] + LONG_KEY_AS, 16, "-%d", done + i);
		H_ASSERT_EQ(lunar_batch_put(a, LONG_BATCH, names, iovs, iovcnts, NULL, results), 0);
		for (int i = 0; i < LONG_BATCH; i++)
			H_ASSERT_EQ(results[i], 0);
	}
}

static void test_fence_queued_get_dropped(void **state)
{
	static uint8_t val[VLEN];
	struct h_proc *p = node("queued", "1ms");
	struct lunar_client *a, *c;
	struct slow s;
	uint64_t t0, ret_ms;
	pthread_t th;
	uint8_t *buf;
	int64_t got;

	(void)state;
	H_ASSERT(p != NULL);
	/* Given: keys a pattern takes seconds over, and a value */
	a = h_client_try(sock, 120000, NULL);
	H_ASSERT(a != NULL);
	put_long_keys(a);
	memset(val, 0x5a, sizeof(val));
	H_ASSERT_EQ(lunar_put(a, "fence/value", val, sizeof(val), NULL), 0);
	c = h_client_try(sock, SHORT_MS, NULL);
	H_ASSERT(c != NULL);
	buf = lunar_alloc(c, VLEN);
	H_ASSERT(buf != NULL);
	/* When: another client's remove holds the only worker, and a get into
	 * registered memory waits behind it past its client's timeout */
	s.c = a;
	H_ASSERT_EQ(pthread_create(&th, NULL, slow_remove, &s), 0);
	h_sleep_ms(100);
	t0 = h_now_ms();
	got = lunar_get_into(c, "fence/value", buf, VLEN);
	ret_ms = h_now_ms();
	memset(buf, 0xee, VLEN); /* the call is over: the application moves on */
	H_ASSERT_EQ(pthread_join(th, NULL), 0);
	h_sleep_ms(300);
	print_message("get: %lld (%s) after %llu ms; the remove ended %lld ms after it returned\n",
		      (long long)got, h_code(got), (unsigned long long)(ret_ms - t0),
		      (long long)(s.end_ms - ret_ms));
	/* Then: the get failed at its timeout (its queued request was dropped
	 * with its session), and nothing landed after it returned */
	H_ASSERT(got < 0);
	H_ASSERT_MSG(ret_ms - t0 < SHORT_MS + 400, "the get took %llu ms",
		     (unsigned long long)(ret_ms - t0));
	H_ASSERT_MSG(s.end_ms > ret_ms, "the remove ended first: no test");
	for (size_t i = 0; i < VLEN; i++)
		H_ASSERT_MSG(buf[i] == 0xee, "byte %zu written after the call returned", i);
	lunar_free(c, buf);
	lunar_close(c);
	lunar_close(a);
	h_stop(p);
}

LUNAR_TEST_MAIN(h_setup, h_teardown, test_fence_hang_ups_past_a_slow_close,
		test_fence_queued_get_dropped)
