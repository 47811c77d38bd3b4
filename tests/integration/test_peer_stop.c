/*
 * test_peer_stop.c - a peer proxy that stops answering on its data port
 * (SIGSTOP: the kernel still accepts its connections and buffers requests,
 * nobody serves them). Master, proxies A and B; values written through A
 * live only on B's segment. With B stopped, a read of them through A must
 * fail within about one transfer timeout, whatever the number of keys in
 * the request and whether A holds their leases, never after one timeout per
 * key or per attempt. The same holds for a batch put placed on B. A client
 * that gives up on a read first never has the value land in its memory
 * after its call returned. Beside an RDMA device, the values reach B over
 * RDMA before it stops.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http_get.h"
#include "tests/cmocka_main.h"

#define NKEYS	6
#define VAL_LEN (64u * 1024u + 13u)
/* The engine's transfer timeout (ENG_DEFAULT_TIMEOUT_MS), and how long a
 * request touching the stopped peer may take: one timeout plus slack. */
#define XFER_TIMEOUT_MS 5000
#define STOPPED_MAX_MS	(XFER_TIMEOUT_MS + 2500)
/* A's client waits far longer, so the proxy's own time is what is seen. */
#define A_CLIENT_TIMEOUT_MS 120000

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_b[H_SEG_NAME];
static struct h_proc *master, *proxy_a, *proxy_b;
static struct lunar_client *ca;
static int b_stopped;

static int setup(void **state)
{
	int port;

	(void)state;
	if (!(master = h_cluster_master(&port, "--client-ttl", "60s", NULL)))
		return -1;
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	proxy_a = h_start_proxy("proxyA", sock_a, port, "--segment-size", "16MiB", NULL);
	proxy_b = h_start_peer("proxyB", sock_b, port, seg_b, "--segment-size", "16MiB", NULL);
	if (!proxy_a || !proxy_b)
		return -1;
	ca = h_client_try(sock_a, A_CLIENT_TIMEOUT_MS, NULL);
	return ca ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (b_stopped && proxy_b && proxy_b->running)
		kill(-proxy_b->pid, SIGCONT);
	lunar_close(ca);
	ca = NULL;
	h_stop(proxy_a);
	h_stop(proxy_b);
	h_cleanup();
	return 0;
}

/* Stop B (every thread of it, before returning: a thread the signal has
 * not stopped yet may still serve a read), or let it go on. */
static void stop_b(int stop)
{
	H_ASSERT(proxy_b->running);
	if (stop)
		H_ASSERT_EQ(h_stop_group(proxy_b), 0);
	else
		H_ASSERT_EQ(kill(-proxy_b->pid, SIGCONT), 0);
	b_stopped = stop;
}

static void key_of(const char *what, int i, char *key, size_t len)
{
	snprintf(key, len, "peer-stop/%s-%d", what, i);
}

/* Print the master's view of key and of the segments. */
static void show_replicas(const char *key)
{
	static char text[65536];
	char path[256];
	int port = hg_log_http_port(master->log);

	snprintf(path, sizeof(path), "/admin/stat?tenant=default&key=%s", key);
	if (port > 0 && hg_get(port, path, text, sizeof(text)) >= 0)
		print_message("master, %s: %s\n", path, text);
	if (port > 0 && hg_get(port, "/admin/segments", text, sizeof(text)) >= 0)
		print_message("master, /admin/segments: %s\n", text);
	print_message("B (%s) is %s\n", seg_b, b_stopped ? "stopped" : "running");
}

/* Whether the master has key's replica on B. */
static int placed_on_b(const char *key)
{
	static char text[65536];
	char path[256], want[H_SEG_NAME + 16];

	snprintf(path, sizeof(path), "/admin/stat?tenant=default&key=%s", key);
	snprintf(want, sizeof(want), "\"segment\":\"%s\"", seg_b);
	return hg_get(hg_log_http_port(master->log), path, text, sizeof(text)) == 200 &&
	       strstr(text, want) != NULL;
}

/* Put NKEYS values through A, each with its one replica on B; read them
 * back through A so that A holds their leases. */
static void put_on_b(const char *what, uint8_t *buf)
{
	const char *pref[1] = {seg_b};
	const struct lunar_put_cfg on_b = {
	    .replica_num = 1, .preferred_segments = pref, .preferred_count = 1};
	int64_t mark;
	char key[64];

	h_rdma_redial(); /* B may have been stopped in the case before */
	mark = h_rdma_mark(proxy_a);
	for (int i = 0; i < NKEYS; i++) {
		key_of(what, i, key, sizeof(key));
		h_fill(buf, VAL_LEN, h_seed(key));
		/* A preferred segment is a preference: the master may place the
		 * value elsewhere (seen twice in full runs, right after B was
		 * stopped, not understood). Such a value would be read from A
		 * while B is stopped, so it is put again. */
		for (int tries = 0;; tries++) {
			H_ASSERT_EQ(lunar_put(ca, key, buf, VAL_LEN, &on_b), 0);
			if (placed_on_b(key))
				break;
			print_message("%s placed off B (try %d)\n", key, tries + 1);
			show_replicas(key);
			H_ASSERT(tries < 3);
			H_ASSERT_EQ(lunar_remove(ca, key, 1), 0);
		}
		H_ASSERT_EQ(lunar_get_into(ca, key, buf, VAL_LEN), VAL_LEN);
	}
	h_rdma_check(proxy_a, mark, 2 * NKEYS); /* a write and a read of each */
}

/* One batch get of every key of B, B stopped: all fail, in time. */
static void test_peer_stop_batch_get_fails_in_one_timeout(void **state)
{
	uint8_t *bufs = malloc((size_t)NKEYS * VAL_LEN);
	char names[NKEYS][64];
	const char *keys[NKEYS];
	struct iovec v[NKEYS];
	const struct iovec *iovs[NKEYS];
	int iovcnts[NKEYS];
	int64_t results[NKEYS];
	uint64_t t0, took;
	int rc;

	(void)state;
	H_ASSERT(bufs != NULL);
	put_on_b("batch", bufs);
	for (int i = 0; i < NKEYS; i++) {
		key_of("batch", i, names[i], sizeof(names[i]));
		keys[i] = names[i];
		v[i] = (struct iovec){bufs + (size_t)i * VAL_LEN, VAL_LEN};
		iovs[i] = &v[i];
		iovcnts[i] = 1;
	}
	stop_b(1);
	t0 = h_now_ms();
	rc = lunar_batch_get_into(ca, NKEYS, keys, iovs, iovcnts, results);
	took = h_now_ms() - t0;
	stop_b(0);
	print_message("batch get of %d keys on a stopped peer: rc %d, %llu ms\n", NKEYS, rc,
		      (unsigned long long)took);
	H_ASSERT_EQ(rc, 0);
	for (int i = 0; i < NKEYS; i++)
		if (results[i] >= 0) /* seen twice (one in CI at 8a5b2ad), not understood */
			show_replicas(keys[i]);
	for (int i = 0; i < NKEYS; i++)
		H_ASSERT_MSG(results[i] < 0, "key %d read %lld bytes from a stopped peer", i,
			     (long long)results[i]);
	H_ASSERT_MSG(took <= STOPPED_MAX_MS, "batch get took %llu ms, more than %u",
		     (unsigned long long)took, STOPPED_MAX_MS);
	free(bufs);
}

/* One get of a leased key, B stopped: fails after one timeout, not two. */
static void test_peer_stop_leased_get_fails_in_one_timeout(void **state)
{
	uint8_t *buf = malloc(VAL_LEN);
	char key[64];
	uint64_t t0, took;
	int64_t got;

	(void)state;
	H_ASSERT(buf != NULL);
	put_on_b("leased", buf);
	key_of("leased", 0, key, sizeof(key));
	stop_b(1);
	t0 = h_now_ms();
	got = lunar_get_into(ca, key, buf, VAL_LEN);
	took = h_now_ms() - t0;
	stop_b(0);
	print_message("get of a leased key on a stopped peer: %lld (%s), %llu ms\n", (long long)got,
		      h_code(got), (unsigned long long)took);
	if (got >= 0) /* where did they come from? (seen once, not understood) */
		show_replicas(key);
	H_ASSERT_MSG(got < 0, "read %lld bytes from a stopped peer", (long long)got);
	H_ASSERT_MSG(took <= STOPPED_MAX_MS, "get took %llu ms, more than %u",
		     (unsigned long long)took, STOPPED_MAX_MS);
	free(buf);
}

/* The bytes of B's segment the master counts as taken, or -1. */
static int64_t b_used_bytes(void)
{
	static char text[1 << 16];
	char sample[128];

	if (hg_get(hg_log_http_port(master->log), "/metrics", text, sizeof(text)) != 200)
		return -1;
	snprintf(sample, sizeof(sample), "lunar_master_segment_used_bytes{segment=\"%s\"}", seg_b);
	return hg_metric(text, sample);
}

/* One batch put of keys placed on B, B stopped: all fail (and are revoked)
 * in time. The writes of a batch go out together (as many at once as the
 * engine has threads for), so the bytes of each that went out may still
 * reach B when it wakes: those ranges stay taken (revoked late), at least
 * one, at most all; the rest were never sent. Once B is back, the same
 * keys can be put and read. */
static void test_peer_stop_batch_put_fails_in_one_timeout(void **state)
{
	const char *pref[1] = {seg_b};
	const struct lunar_put_cfg on_b = {
	    .replica_num = 1, .preferred_segments = pref, .preferred_count = 1};
	uint8_t *bufs = malloc((size_t)NKEYS * VAL_LEN);
	char names[NKEYS][64];
	const char *keys[NKEYS];
	struct iovec v[NKEYS];
	const struct iovec *iovs[NKEYS];
	int iovcnts[NKEYS], results[NKEYS];
	uint64_t t0, took;
	int64_t used;
	int rc;

	(void)state;
	H_ASSERT(bufs != NULL);
	H_ASSERT_EQ(b_used_bytes(), 0);
	for (int i = 0; i < NKEYS; i++) {
		key_of("put", i, names[i], sizeof(names[i]));
		keys[i] = names[i];
		h_fill(bufs + (size_t)i * VAL_LEN, VAL_LEN, h_seed(names[i]));
		v[i] = (struct iovec){bufs + (size_t)i * VAL_LEN, VAL_LEN};
		iovs[i] = &v[i];
		iovcnts[i] = 1;
	}
	/* A connection to B that has already passed the keyed handshake, as
	 * after any earlier transfer: the first key's bytes then leave before
	 * B's silence is noticed. (A new keyed connection to a stopped B sends
	 * no payload at all: its handshake gets no answer.) */
	H_ASSERT_EQ(lunar_put(ca, "put/warm", bufs, VAL_LEN, &on_b), 0);
	H_ASSERT_EQ(lunar_remove(ca, "put/warm", 0), 0);
	H_ASSERT_EQ(b_used_bytes(), 0);
	stop_b(1);
	t0 = h_now_ms();
	rc = lunar_batch_put(ca, NKEYS, keys, iovs, iovcnts, &on_b, results);
	took = h_now_ms() - t0;
	stop_b(0);
	print_message("batch put of %d keys on a stopped peer: rc %d, %llu ms\n", NKEYS, rc,
		      (unsigned long long)took);
	H_ASSERT_EQ(rc, 0);
	for (int i = 0; i < NKEYS; i++)
		H_ASSERT_EQ(results[i], LUNAR_ERR_TRANSFER_FAIL);
	H_ASSERT_MSG(took <= STOPPED_MAX_MS, "batch put took %llu ms, more than %u",
		     (unsigned long long)took, STOPPED_MAX_MS);
	used = b_used_bytes();
	print_message("B's segment after the revokes: %lld bytes taken\n", (long long)used);
	H_ASSERT_MSG(used >= VAL_LEN && used < (NKEYS + 1) * (int64_t)VAL_LEN,
		     "%lld bytes of B taken: want the ranges written in part", (long long)used);
	/* Revoked, not left PROCESSING: put again and read back. */
	for (int i = 0; i < NKEYS; i++) {
		H_ASSERT_EQ(lunar_put(ca, keys[i], v[i].iov_base, VAL_LEN, &on_b), 0);
		memset(v[i].iov_base, 0, VAL_LEN);
		H_ASSERT_EQ(lunar_get_into(ca, keys[i], v[i].iov_base, VAL_LEN), VAL_LEN);
		H_ASSERT(h_verify(v[i].iov_base, VAL_LEN, h_seed(keys[i])) < 0);
	}
	free(bufs);
}

/* The late get: a client with a short timeout gets a key of stopped B into
 * memory from lunar_alloc; B wakes after the client's timeout. */
#define SHORT_TIMEOUT_MS 1000
#define B_WAKES_MS	 1500

struct late_get {
	struct lunar_client *c;
	const char *key;
	uint8_t *buf;
	int64_t got;
	uint64_t took;
};

static void *late_get_main(void *arg)
{
	struct late_get *g = arg;
	uint64_t t0 = h_now_ms();

	g->got = lunar_get_into(g->c, g->key, g->buf, VAL_LEN);
	g->took = h_now_ms() - t0;
	/* The call is over: the application uses its memory for other things. */
	memset(g->buf, 0xee, VAL_LEN);
	return NULL;
}

/*
 * A get into registered memory that times out while A still waits on B:
 * once the call has returned, nothing of the value may land in that memory
 * (the application has moved on). The call waits for A to finish the
 * request instead, a bounded time.
 */
static void test_peer_stop_timed_out_get_leaves_registered_memory_alone(void **state)
{
	uint8_t *tmp = malloc(VAL_LEN);
	char key[64];
	struct late_get g = {.key = key};
	pthread_t th;

	(void)state;
	H_ASSERT(tmp != NULL);
	put_on_b("late", tmp);
	key_of("late", 0, key, sizeof(key));
	/* The handshake, and registering the region for RDMA, in the
	 * soft-RoCE machine's emulation under a sanitizer may outlast this
	 * client's 1 s timeout when the host is busy; the session breaks and
	 * the next call connects again. */
	for (int tries = 0; tries < 3 && !g.c; tries++)
		g.c = h_client_try(sock_a, SHORT_TIMEOUT_MS, NULL);
	H_ASSERT(g.c != NULL);
	for (int tries = 0; tries < 3 && !g.buf; tries++)
		g.buf = lunar_alloc(g.c, VAL_LEN);
	H_ASSERT(g.buf != NULL);
	stop_b(1);
	H_ASSERT_EQ(pthread_create(&th, NULL, late_get_main, &g), 0);
	h_sleep_ms(B_WAKES_MS);
	stop_b(0);
	pthread_join(th, NULL);
	/* Room for a late write to land, were one still coming. */
	h_sleep_ms(500);
	print_message("get timed out: %lld (%s) after %llu ms\n", (long long)g.got, h_code(g.got),
		      (unsigned long long)g.took);
	H_ASSERT_MSG(g.got < 0, "the get succeeded: %lld", (long long)g.got);
	for (size_t i = 0; i < VAL_LEN; i++)
		H_ASSERT_MSG(g.buf[i] == 0xee, "byte %zu written after the call returned", i);
	H_ASSERT_MSG(g.took <= 2u * SHORT_TIMEOUT_MS + 500u, "the get took %llu ms",
		     (unsigned long long)g.took);
	lunar_free(g.c, g.buf);
	lunar_close(g.c);
	free(tmp);
}

/* A put whose peer is gone (B killed, still mounted at the master) sends
 * nothing, so its range on B is given back at once: A's pooled connection
 * to B shows B's end of stream before a byte goes out on it (over RDMA,
 * the killed owner's lifeline has hung up), and a new one is refused.
 * Runs last: B is gone after it. */
static void test_peer_stop_refused_put_gives_space_back(void **state)
{
	const char *pref[1] = {seg_b};
	const struct lunar_put_cfg on_b = {
	    .replica_num = 1, .preferred_segments = pref, .preferred_count = 1};
	uint8_t *buf = malloc(VAL_LEN);
	int64_t before, after_pooled, after_refused;
	char key[64];

	(void)state;
	H_ASSERT(buf != NULL);
	put_on_b("refused", buf); /* A now has a pooled connection to B */
	h_kill(proxy_b);
	before = b_used_bytes();
	key_of("refused-pooled", 0, key, sizeof(key));
	H_ASSERT_EQ(lunar_put(ca, key, buf, VAL_LEN, &on_b), LUNAR_ERR_TRANSFER_FAIL);
	after_pooled = b_used_bytes();
	key_of("refused-unsent", 0, key, sizeof(key));
	H_ASSERT_EQ(lunar_put(ca, key, buf, VAL_LEN, &on_b), LUNAR_ERR_TRANSFER_FAIL);
	after_refused = b_used_bytes();
	print_message("B's segment: %lld bytes taken, %lld after a put with a dead pooled "
		      "connection, %lld after a refused one\n",
		      (long long)before, (long long)after_pooled, (long long)after_refused);
	H_ASSERT_MSG(after_pooled == before, "a put on a peer gone held %lld bytes of B",
		     (long long)(after_pooled - before));
	H_ASSERT_MSG(after_refused == before, "a refused put held %lld bytes of B",
		     (long long)(after_refused - before));
	free(buf);
}

LUNAR_TEST_MAIN(setup, teardown, test_peer_stop_batch_put_fails_in_one_timeout,
		test_peer_stop_leased_get_fails_in_one_timeout,
		test_peer_stop_batch_get_fails_in_one_timeout,
		test_peer_stop_timed_out_get_leaves_registered_memory_alone,
		test_peer_stop_refused_put_gives_space_back)
