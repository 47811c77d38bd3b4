/*
 * test_faults_evict_reads.c - gets while eviction runs (SPEC §3: a leased
 * object is never evicted). A master with the eviction watermark at 0.9 and
 * 1 s leases; proxy A with a 32 MiB segment, where two writer threads put
 * 256 KiB values for 5 s, many times the segment; proxy B, a pure client
 * node. Eight reader threads, four on A (local copies) and four on B
 * (through A's data port), read a hot set of keys and, one read in four,
 * values the writers committed lately, which eviction takes away. Every get
 * returns the whole value, byte for byte, or OBJECT_NOT_FOUND; no other
 * code. The hot keys, read all the time, keep their leases and are never
 * evicted: they never miss. Writers see success or NO_AVAILABLE_HANDLE
 * (back-pressure) only. Hits and misses are printed; the master's evictions
 * went up; the aftermath on A is clean (its background client waits while
 * the segment is full: there a put may meet the same back-pressure, and a
 * value not yet read back may be evicted, as it should).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case_util.h"
#include "harness_after.h"
#include "tests/cmocka_main.h"

#define KIB	   1024u
#define MIB	   (1024u * KIB)
#define LEN	   (256u * KIB)
#define NHOT	   16 /* 4 MiB of the 32 */
#define WRITERS	   2
#define WRITES_MIN 192	/* each: at least 3 segments' worth in all */
#define RUN_MS	   5000 /* 5 lease TTLs: the hot keys' leases are renewed */
#define READERS	   8	/* half on A, half on B */
#define RECENT	   64	/* a cold read picks one of a writer's last RECENT values */
#define ARENA	   (4u * MIB)
#define EVICTIONS  "lunar_master_evictions_total"

static char sock_a[PATH_MAX], sock_b[PATH_MAX];
static struct h_proc *master, *proxy_a, *proxy_b;
static int mhttp;
static struct h_after after;

static int setup(void **state)
{
	int port = h_free_port();

	if (case_setup(state))
		return -1;
	master = track(h_start_master("master", port, "--eviction-high-watermark-ratio", "0.9",
				      "--eviction-ratio", "0.05", "--kv-lease-ttl", "1s",
				      "--allocation-strategy", "local_first", NULL));
	if (!master)
		return -1;
	mhttp = http_port_of(master);
	h_named_sock(sock_a, "a");
	h_named_sock(sock_b, "b");
	/* --admin-calls: the aftermath's client removes by force, and so does
	 * the test's remove_all at the end. */
	proxy_a = track(h_start_proxy("proxyA", sock_a, port, "--segment-size", "32MiB",
				      "--ping-interval", "100ms", "--admin-calls", NULL));
	proxy_b = track(h_start_proxy("proxyB", sock_b, port, "--segment-size", "0",
				      "--ping-interval", "100ms", NULL));
	return proxy_a && proxy_b ? 0 : -1;
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	return case_teardown(state);
}

static void hot_key(char key[64], int i)
{
	snprintf(key, 64, "evict-reads/hot-%02d", i);
}

static void written_key(char key[64], int w, int i)
{
	snprintf(key, 64, "evict-reads/w%d-%03d", w, i);
}

struct run {
	atomic_int stop;
	atomic_int committed[WRITERS]; /* values each writer has put */
};

static struct run run;

struct writer {
	pthread_t tid;
	int id;
	int ok, full, other, first_other;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	struct lunar_client *c = h_client_try(sock_a, H_CLIENT_TIMEOUT_MS, &w->first_other);
	uint8_t *buf = malloc(LEN);
	char key[64];

	if (!c || !buf)
		w->other++;
	for (int i = 0; c && buf && !atomic_load(&run.stop);) {
		int rc;

		written_key(key, w->id, i);
		h_fill(buf, LEN, h_seed(key));
		rc = lunar_put(c, key, buf, LEN, NULL);
		if (rc == LUNAR_ERR_NO_AVAILABLE_HANDLE) {
			w->full++;
			h_sleep_ms(5);
			continue;
		}
		if (rc && w->other++ == 0)
			w->first_other = rc;
		if (rc)
			break;
		w->ok++;
		atomic_store(&run.committed[w->id], ++i);
	}
	lunar_close(c);
	free(buf);
	return NULL;
}

struct reader {
	pthread_t tid;
	const char *sock;
	unsigned seed;
	int hot_hit, hot_miss, cold_hit, cold_miss, bad;
	char first_bad[120];
};

/* One read: the key's whole value, or OBJECT_NOT_FOUND; anything else is
 * bad, recorded. 1 hit, 0 miss, -1 bad. */
static int read_one(struct reader *r, struct lunar_client *c, const char *key, uint8_t *buf)
{
	int64_t rc = lunar_get_into(c, key, buf, LEN), wrong = -1;

	if (rc == LEN && (wrong = h_verify(buf, LEN, h_seed(key))) < 0)
		return 1;
	if (rc == LUNAR_ERR_OBJECT_NOT_FOUND)
		return 0;
	if (r->bad++ == 0)
		snprintf(r->first_bad, sizeof(r->first_bad), "get %s = %lld (%s), wrong at %lld",
			 key, (long long)rc, h_code(rc), (long long)wrong);
	return -1;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct lunar_opts o = {
	    .socket_path = r->sock, .timeout_ms = H_CLIENT_TIMEOUT_MS, .arena_bytes = ARENA};
	struct lunar_client *c = NULL;
	uint8_t *buf = malloc(LEN);
	char key[64];

	if (lunar_connect(&o, &c))
		c = NULL; /* no assertion off the main thread: counted as bad */

	while (c && buf && !atomic_load(&run.stop)) {
		unsigned x = rand_r(&r->seed);
		int w = (int)(x / 4 % WRITERS), n = atomic_load(&run.committed[w]), got;

		if (x % 4 || !n) {
			hot_key(key, (int)(x / 8 % NHOT));
			got = read_one(r, c, key, buf);
			r->hot_hit += got > 0;
			r->hot_miss += got == 0;
		} else {
			written_key(key, w, n - 1 - (int)(x / 16 % (n < RECENT ? n : RECENT)));
			got = read_one(r, c, key, buf);
			r->cold_hit += got > 0;
			r->cold_miss += got == 0;
		}
		h_sleep_ms(1);
	}
	if (!c || !buf)
		r->bad++;
	lunar_close(c);
	free(buf);
	return NULL;
}

static void test_faults_evict_reads_leased_never_evicted(void **state)
{
	struct writer w[WRITERS];
	struct reader r[READERS];
	struct lunar_client *ca, *cb;
	uint8_t *buf = malloc(LEN);
	int hot_hit = 0, hot_miss = 0, cold_hit = 0, cold_miss = 0, puts_ok = 0;
	int64_t ev0, ev, rc;
	uint64_t t0;
	char key[64];

	(void)state;
	H_ASSERT(buf != NULL);
	h_after_begin(&after, sock_a, proxy_a, mhttp);
	ca = h_client(sock_a);
	cb = h_client(sock_b);
	for (int i = 0; i < NHOT; i++) {
		hot_key(key, i);
		put_seeded(ca, key, buf, LEN, h_seed(key), NULL);
	}
	ev0 = h_metric_sum(mhttp, EVICTIONS);
	H_ASSERT(ev0 >= 0);

	h_after_pause(&after);
	memset(&run, 0, sizeof(run));
	memset(w, 0, sizeof(w));
	memset(r, 0, sizeof(r));
	for (int i = 0; i < READERS; i++) {
		r[i].sock = i % 2 ? sock_b : sock_a;
		r[i].seed = 0x9e3779b9u * (unsigned)(i + 1);
		H_ASSERT_EQ(pthread_create(&r[i].tid, NULL, reader_main, &r[i]), 0);
	}
	h_sleep_ms(300); /* the hot keys are read, and leased, first */
	t0 = h_now_ms();
	for (int i = 0; i < WRITERS; i++) {
		w[i].id = i;
		H_ASSERT_EQ(pthread_create(&w[i].tid, NULL, writer_main, &w[i]), 0);
	}
	h_sleep_ms(RUN_MS);
	atomic_store(&run.stop, 1);
	for (int i = 0; i < WRITERS; i++) {
		pthread_join(w[i].tid, NULL);
		puts_ok += w[i].ok;
	}
	for (int i = 0; i < READERS; i++)
		pthread_join(r[i].tid, NULL);
	ev = h_metric_sum(mhttp, EVICTIONS) - ev0;

	for (int i = 0; i < WRITERS; i++)
		printf("  writer %d: %d puts, %d NO_AVAILABLE_HANDLE retries, %d failed\n", i,
		       w[i].ok, w[i].full, w[i].other);
	for (int i = 0; i < READERS; i++) {
		printf("  reader %d on %s: hot %d hits %d misses; recent %d hits %d misses; %d "
		       "bad\n",
		       i, i % 2 ? "B" : "A", r[i].hot_hit, r[i].hot_miss, r[i].cold_hit,
		       r[i].cold_miss, r[i].bad);
		hot_hit += r[i].hot_hit;
		hot_miss += r[i].hot_miss;
		cold_hit += r[i].cold_hit;
		cold_miss += r[i].cold_miss;
	}
	printf("  in %llu ms: %lld evictions; hot %d hits %d misses, recent %d hits %d misses\n",
	       (unsigned long long)(h_now_ms() - t0), (long long)ev, hot_hit, hot_miss, cold_hit,
	       cold_miss);
	for (int i = 0; i < READERS; i++)
		H_ASSERT_MSG(r[i].bad == 0, "reader %d: %d bad reads, first: %s", i, r[i].bad,
			     r[i].first_bad);
	for (int i = 0; i < WRITERS; i++) {
		H_ASSERT_MSG(w[i].other == 0, "writer %d: a put failed with %d (%s)", i,
			     w[i].first_other, h_code(w[i].first_other));
		H_ASSERT_MSG(w[i].ok >= WRITES_MIN, "writer %d put %d values in %d ms", i, w[i].ok,
			     RUN_MS);
	}
	H_ASSERT_MSG(ev >= ((int64_t)puts_ok * LEN - 32 * MIB) / LEN,
		     "%lld evictions for %d values of 256 KiB into 32 MiB", (long long)ev, puts_ok);
	H_ASSERT_MSG(hot_miss == 0, "%d reads of the hot, leased keys missed", hot_miss);
	H_ASSERT(hot_hit > 0 && cold_hit > 0);
	H_ASSERT_MSG(cold_miss > 0, "no read of a recent value missed: nothing raced eviction");
	for (int i = 0; i < NHOT; i++) {
		hot_key(key, i);
		check_seeded(ca, key, buf, LEN, h_seed(key));
		check_seeded(cb, key, buf, LEN, h_seed(key));
	}

	/* B's data connections to A go with B; A's values go by force. */
	lunar_close(cb);
	h_stop(proxy_b);
	rc = lunar_remove_all(ca, 1);
	H_ASSERT_MSG(rc >= NHOT, "remove_all = %lld (%s)", (long long)rc, h_code(rc));
	lunar_close(ca);
	h_after_resume(&after);
	h_after_end(&after);
	free(buf);
}

LUNAR_TEST_MAIN_EACH(setup, teardown, test_faults_evict_reads_leased_never_evicted)
