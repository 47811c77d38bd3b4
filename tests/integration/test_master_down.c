/*
 * test_master_down.c - a proxy whose master stopped answering fails calls
 * fast: once its heartbeat's Ping went unanswered, a put or an exists that
 * needs the master returns RPC_FAIL at once (well under 100 ms) instead of
 * each waiting out --rpc-timeout, and the first answered Ping after the
 * master is back ends that. The master is stopped with SIGSTOP (a master
 * that hangs, the worst case: nothing tells the proxy, only the timeout),
 * and killed at the end. The first lost Ping is sent again at once, not a
 * ping interval later: a master that answers again soon after is used
 * again at once (a blip costs calls one round trip).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "tests/cmocka_main.h"

/* A generous bound for "at once": a behaviour, not a benchmark. */
#define FAST_MS 100
/* Long beside FAST_MS, so a call that waits for the master is told apart. */
#define RPC_TIMEOUT "2s"
#define NOTICE_MS   10000 /* for the proxy to see the master gone, and back */
#define VALUE_LEN   4096

/* A master, a proxy with these heartbeat settings joined to it, and its
 * client, which has put one value under its name. */
struct node {
	struct h_proc *m, *p;
	struct lunar_client *c;
};

static char value[VALUE_LEN];

static void node_start(struct node *n, const char *name, const char *interval, const char *timeout)
{
	char sock[PATH_MAX];
	int port;

	n->m = h_cluster_master(&port, NULL);
	H_ASSERT(n->m != NULL);
	h_named_sock(sock, name);
	n->p = h_start_proxy("proxy", sock, port, "--ping-interval", interval, "--rpc-timeout",
			     timeout, NULL);
	H_ASSERT(n->p != NULL);
	n->c = h_client(sock);
	h_fill(value, sizeof(value), h_seed(name));
	H_ASSERT_EQ(lunar_put(n->c, name, value, sizeof(value), NULL), 0);
}

static void node_stop(struct node *n)
{
	lunar_close(n->c);
	h_stop(n->p);
	h_kill(n->m);
}

static void test_master_down_calls_fail_fast(void **state)
{
	struct node n;
	uint64_t t0, took;
	int rc;

	(void)state;
	node_start(&n, "up", "100ms", RPC_TIMEOUT);
	H_ASSERT_EQ(h_stop_group(n.m), 0);
	h_wait_health(n.c, 2, NOTICE_MS);
	t0 = h_now_ms();
	rc = lunar_put(n.c, "while-down", value, sizeof(value), NULL);
	took = h_now_ms() - t0;
	H_ASSERT_EQ(rc, LUNAR_ERR_RPC_FAIL);
	H_ASSERT_MSG(took < FAST_MS, "put with the master down took %llu ms",
		     (unsigned long long)took);
	t0 = h_now_ms();
	rc = lunar_exists(n.c, "never-put");
	took = h_now_ms() - t0;
	H_ASSERT_EQ(rc, LUNAR_ERR_RPC_FAIL);
	H_ASSERT_MSG(took < FAST_MS, "exists with the master down took %llu ms",
		     (unsigned long long)took);

	/* back: the next answered Ping ends the fast failures */
	H_ASSERT_EQ(kill(-n.m->pid, SIGCONT), 0);
	h_wait_health(n.c, 0, NOTICE_MS);
	H_ASSERT_EQ(lunar_put(n.c, "after", value, sizeof(value), NULL), 0);
	H_ASSERT_EQ(lunar_exists(n.c, "after"), 1);

	node_stop(&n);
}

/* --ping-interval long beside --rpc-timeout: a proxy that waited out the
 * interval after its lost Ping would take the master for down that long. */
#define BLIP_INTERVAL "3s"
#define BLIP_TIMEOUT  "1s"
#define BLIP_BACK_MS  1500

static void test_master_down_blip_ends_at_once(void **state)
{
	struct node n;
	uint64_t t0, took;
	int rc;

	(void)state;
	node_start(&n, "blip", BLIP_INTERVAL, BLIP_TIMEOUT);
	/* A Ping lost: the master is down for the proxy, and the Ping is out
	 * again at once; the master wakes while that one waits. */
	H_ASSERT_EQ(h_stop_group(n.m), 0);
	h_wait_health(n.c, 2, NOTICE_MS);
	H_ASSERT_EQ(kill(-n.m->pid, SIGCONT), 0);
	t0 = h_now_ms();
	while ((rc = lunar_exists(n.c, "blip")) != 1 && h_now_ms() - t0 < NOTICE_MS)
		h_sleep_ms(10);
	took = h_now_ms() - t0;
	H_ASSERT_EQ(rc, 1);
	printf("  master used again %llu ms after it woke (ping interval %s)\n",
	       (unsigned long long)took, BLIP_INTERVAL);
	H_ASSERT_MSG(took < BLIP_BACK_MS, "the master was used again only after %llu ms",
		     (unsigned long long)took);
	node_stop(&n);
}

LUNAR_TEST_MAIN(h_setup, h_teardown, test_master_down_calls_fail_fast,
		test_master_down_blip_ends_at_once)
