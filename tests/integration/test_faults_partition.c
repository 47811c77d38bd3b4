/*
 * test_faults_partition.c - a proxy cut off from its master for three
 * client TTLs (SPEC §3 client liveness): the master, started with a short
 * --client-ttl, is SIGSTOPped (a partition as the proxy sees it: requests
 * go out, nothing answers). Meanwhile every call that needs the master ends
 * within a bound with a typed error (the first ones within --rpc-timeout,
 * the rest at once once the heartbeat's Ping went unanswered), and a get
 * returns the exact bytes or such an error, never others. On SIGCONT the
 * master has declared the proxy dead (its silence outlasted the TTL): the
 * proxy's next Ping is answered NEED_REMOUNT and it re-mounts
 * (ReMountSegment counted, the log says so); the keys it held are misses,
 * even those it had read just before (their leases died with the master's
 * metadata), new puts work, and the aftermath is clean.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case_util.h"
#include "harness_after.h"
#include "tests/cmocka_main.h"

#define TTL_MS	       1000
#define RPC_TIMEOUT_MS 500
#define STOP_MS	       (3 * TTL_MS)
/* A call while the master is stopped: its RPC timeout at most, plus slack
 * for a loaded machine. */
#define CALL_BOUND_MS H_BOUND_MS(RPC_TIMEOUT_MS + 700)
#define NOLD	      16
#define NNEW	      16
#define LEN	      (64u * 1024u)
#define REMOUNTS      "lunar_master_calls_total{method=\"ReMountSegment\"}"

static char sock[PATH_MAX];
static struct h_proc *master, *proxy;
static int mhttp;
static struct h_after after;

static int setup(void **state)
{
	int port = h_free_port();

	if (case_setup(state))
		return -1;
	master = track(h_start_master("master", port, "--client-ttl", "1s", NULL));
	if (!master)
		return -1;
	mhttp = http_port_of(master);
	h_named_sock(sock, "partition");
	/* --admin-calls: the aftermath's client removes by force. */
	proxy = track(h_start_proxy("proxy", sock, port, "--ping-interval", "100ms",
				    "--rpc-timeout", "500ms", "--admin-calls", NULL));
	return proxy ? 0 : -1;
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	if (master && master->running)
		kill(-master->pid, SIGCONT);
	return case_teardown(state);
}

static void key_of(char key[64], const char *kind, int i)
{
	snprintf(key, 64, "partition/%s-%02d", kind, i);
}

/* What the calls made while the master was stopped came to. */
struct gap {
	int calls, fast_fails, slow_fails, hits;
	int bad;	 /* calls that broke the rules */
	char first[200]; /* the first of them */
	uint64_t longest_ms;
};

static void gap_bad(struct gap *g, const char *what, const char *key, int64_t rc, uint64_t ms)
{
	if (g->bad++ == 0)
		snprintf(g->first, sizeof(g->first), "%s %s = %lld (%s) in %llu ms", what, key,
			 (long long)rc, h_code(rc), (unsigned long long)ms);
}

/* One call's result: a typed error of a master out of reach, within the
 * bound; or (get, exists) the answer the lease cache may still give. */
static void gap_judge(struct gap *g, const char *what, const char *key, int64_t rc, int64_t ok,
		      uint64_t ms)
{
	g->calls++;
	if (ms > g->longest_ms)
		g->longest_ms = ms;
	if (ms > CALL_BOUND_MS)
		gap_bad(g, what, key, rc, ms);
	else if (rc == LUNAR_ERR_RPC_FAIL || rc == LUNAR_ERR_RPC_TIMEOUT)
		ms < 100 ? g->fast_fails++ : g->slow_fails++;
	else if (ok && rc == ok)
		g->hits++;
	else
		gap_bad(g, what, key, rc, ms);
}

/* Calls of every kind until the master has been stopped for STOP_MS. No
 * assertion here: the caller wakes the master first. */
static void calls_while_stopped(struct lunar_client *c, uint8_t *buf, uint64_t t_stop,
				struct gap *g)
{
	char key[64];

	for (int i = 0; h_now_ms() < t_stop + STOP_MS; i++) {
		uint64_t t0 = h_now_ms();
		int64_t rc;

		switch (i % 3) {
		case 0:
			key_of(key, "during", i);
			h_fill(buf, LEN, h_seed(key));
			rc = lunar_put(c, key, buf, LEN, NULL);
			gap_judge(g, "put", key, rc, 0, h_now_ms() - t0);
			break;
		case 1:
			key_of(key, "old", i % NOLD);
			rc = lunar_get_into(c, key, buf, LEN);
			if (rc == LEN && h_verify(buf, LEN, h_seed(key)) >= 0)
				rc = LUNAR_ERR_INTERNAL; /* wrong bytes: never allowed */
			gap_judge(g, "get", key, rc, LEN, h_now_ms() - t0);
			break;
		default:
			key_of(key, "never", i);
			rc = lunar_exists(c, key);
			gap_judge(g, "exists", key, rc, 0, h_now_ms() - t0);
			break;
		}
		h_sleep_ms(20);
	}
}

static void test_faults_partition_proxy_declared_dead(void **state)
{
	uint8_t *buf = malloc(LEN);
	struct lunar_client *c;
	struct gap g = {0};
	int64_t remounts;
	uint64_t t_stop, t_cont;
	char key[64];

	(void)state;
	H_ASSERT(buf != NULL);
	h_after_begin(&after, sock, proxy, mhttp);
	c = h_client(sock);
	/* Keys put and read (leased, in the proxy's lease cache) before. */
	for (int i = 0; i < NOLD; i++) {
		key_of(key, "old", i);
		put_seeded(c, key, buf, LEN, h_seed(key), NULL);
		check_seeded(c, key, buf, LEN, h_seed(key));
	}
	remounts = h_metric_sum(mhttp, REMOUNTS);
	H_ASSERT(remounts >= 0);

	/* The background client would fail its puts: it waits the gap out. */
	h_after_pause(&after);
	H_ASSERT_EQ(h_stop_group(master), 0);
	t_stop = h_now_ms();
	calls_while_stopped(c, buf, t_stop, &g);
	H_ASSERT_EQ(kill(-master->pid, SIGCONT), 0);
	t_cont = h_now_ms();
	printf("  master stopped %llu ms: %d calls, %d failed at once, %d within the RPC "
	       "timeout, %d answered from leases; the longest took %llu ms\n",
	       (unsigned long long)(t_cont - t_stop), g.calls, g.fast_fails, g.slow_fails, g.hits,
	       (unsigned long long)g.longest_ms);
	H_ASSERT_MSG(g.bad == 0, "%d calls broke the rules while the master was stopped; first: %s",
		     g.bad, g.first);
	H_ASSERT_MSG(g.fast_fails > g.calls / 2, "only %d of %d calls failed at once", g.fast_fails,
		     g.calls);

	/* The master declared the proxy dead; the proxy was told to re-mount. */
	H_ASSERT_EQ(h_wait_log(master, "silent for", H_BOUND_MS(5000)), 0);
	H_ASSERT_EQ(h_wait_log(proxy, "re-mount", H_BOUND_MS(5000)), 0);
	h_wait_health(c, 0, H_BOUND_MS(5000));
	printf("  healthy again %llu ms after SIGCONT\n",
	       (unsigned long long)(h_now_ms() - t_cont));
	H_ASSERT_MSG(h_metric_sum(mhttp, REMOUNTS) > remounts, "no ReMountSegment after SIGCONT");

	/* What it held is gone, and a lease from before is no way back. */
	for (int i = 0; i < NOLD; i++) {
		int64_t rc;

		key_of(key, "old", i);
		rc = lunar_get_into(c, key, buf, LEN);
		H_ASSERT_MSG(rc == LUNAR_ERR_OBJECT_NOT_FOUND,
			     "get %s after the re-mount = %lld (%s)", key, (long long)rc,
			     h_code(rc));
		H_ASSERT_EQ(lunar_exists(c, key), 0);
	}
	for (int i = 0; i < NNEW; i++) {
		key_of(key, "new", i);
		put_seeded(c, key, buf, LEN, h_seed(key), NULL);
		check_seeded(c, key, buf, LEN, h_seed(key));
	}
	for (int i = 0; i < NNEW; i++) {
		key_of(key, "new", i);
		H_ASSERT_EQ(lunar_remove(c, key, 1), 0);
	}
	lunar_close(c);
	h_after_resume(&after);
	h_after_end(&after);
	free(buf);
}

LUNAR_TEST_MAIN_EACH(setup, teardown, test_faults_partition_proxy_declared_dead)
