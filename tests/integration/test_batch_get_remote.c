/*
 * test_batch_get_remote.c - a get of several keys whose values live on
 * another proxy reads them at once, on several connections to it, not one
 * after the other on one. One lunar-master; proxy A contributes no DRAM, so
 * every value put through A lands on B's segment. Puts one at a time use one
 * pooled connection from A to B; a batch get of the same keys, through the
 * master's lists and then through A's lease cache, reads every value
 * byte-exact and has A open more connections to B than that one. A key in
 * the batch that is missing keeps its own code beside the others. Beside
 * an RDMA device (tests/vm/), A's writes and reads go by RDMA.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define NKEYS	8
#define VAL_LEN (64u * 1024u + 13u) /* one slice each: concurrency is per key */
#define PEERS	"lunar_proxy_peer_connections"
#define ROUNDS	20 /* batch gets tried before concluding they never overlap */

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_b[H_SEG_NAME];
static struct h_proc *proxy_a, *proxy_b;
static struct lunar_client *ca;

static int setup(void **state)
{
	(void)state;
	if (h_remote_pair(sock_a, sock_b, seg_b, &proxy_a, &proxy_b))
		return -1;
	ca = h_client(sock_a);
	return ca ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	lunar_close(ca);
	ca = NULL;
	h_stop(proxy_a);
	h_stop(proxy_b);
	h_cleanup();
	return 0;
}

/* A's connections to other proxies' data ports, idle or in use. */
static int64_t a_peer_conns(void)
{
	return h_metric(proxy_a, PEERS);
}

struct batch {
	char names[NKEYS + 1][64];
	const char *keys[NKEYS + 1];
	uint8_t *bufs;
	struct iovec v[NKEYS + 1];
	const struct iovec *iovs[NKEYS + 1];
	int iovcnts[NKEYS + 1];
	int64_t results[NKEYS + 1];
};

/* Keys 0..NKEYS-1 put (one at a time), key NKEYS never. */
static void batch_put(struct batch *b)
{
	const struct lunar_put_cfg one = {.replica_num = 1};

	b->bufs = malloc((size_t)(NKEYS + 1) * VAL_LEN);
	H_ASSERT(b->bufs != NULL);
	for (int i = 0; i <= NKEYS; i++) {
		snprintf(b->names[i], sizeof(b->names[i]), "bgr/key-%d", i);
		b->keys[i] = b->names[i];
		b->v[i] = (struct iovec){b->bufs + (size_t)i * VAL_LEN, VAL_LEN};
		b->iovs[i] = &b->v[i];
		b->iovcnts[i] = 1;
		if (i == NKEYS)
			continue;
		h_fill(b->v[i].iov_base, VAL_LEN, h_seed(b->keys[i]));
		H_ASSERT_EQ(lunar_put(ca, b->keys[i], b->v[i].iov_base, VAL_LEN, &one), 0);
	}
}

/* One batch get of every key: the values byte-exact, the missing key not found. */
static void batch_get(struct batch *b, const char *when)
{
	memset(b->bufs, 0, (size_t)(NKEYS + 1) * VAL_LEN);
	H_ASSERT_EQ(lunar_batch_get_into(ca, NKEYS + 1, b->keys, b->iovs, b->iovcnts, b->results),
		    0);
	for (int i = 0; i < NKEYS; i++) {
		H_ASSERT_MSG(b->results[i] == (int64_t)VAL_LEN, "%s: %s = %lld (%s)", when,
			     b->keys[i], (long long)b->results[i], h_code(b->results[i]));
		H_ASSERT_EQ(h_verify(b->v[i].iov_base, VAL_LEN, h_seed(b->keys[i])), -1);
	}
	H_ASSERT_EQ(b->results[NKEYS], LUNAR_ERR_OBJECT_NOT_FOUND);
}

static void test_batch_get_remote_reads_at_once(void **state)
{
	int64_t mark = h_rdma_mark(proxy_a), before, after = 0;
	struct batch b;
	int round;

	(void)state;
	batch_put(&b);
	before = a_peer_conns();
	print_message("A's connections to B after %d puts one at a time: %lld\n", NKEYS,
		      (long long)before);
	H_ASSERT_EQ(before, 1);
	/* Through the master's lists (no lease held yet), then the cache's.
	 * Reads one after the other never need a second connection; at once,
	 * the engine's I/O threads and the worker each take one. */
	batch_get(&b, "first batch, the master's lists");
	h_rdma_check(proxy_a, mark, 2 * NKEYS); /* each key's write and read */
	for (round = 0; round < ROUNDS && (after = a_peer_conns()) < 2; round++)
		batch_get(&b, "through the lease cache");
	print_message("after %d batch gets: %lld connections\n", round + 1, (long long)after);
	H_ASSERT_MSG(after >= 2, "%d batch gets of %d remote keys used one connection", round + 1,
		     NKEYS);
	batch_get(&b, "last");
	free(b.bufs);
}

LUNAR_TEST_MAIN(setup, teardown, test_batch_get_remote_reads_at_once)
