/*
 * test_faults_restart_fast.c - a proxy SIGKILLed and started again at once
 * on the same socket path and data port, with a peer reading its keys
 * throughout. Two proxies A and B and a separate master (local-first
 * placement: B's keys live in B's segment); a reader on A reads B's keys
 * from before the kill until after B is back: every read is a miss
 * (OBJECT_NOT_FOUND, or TRANSFER_FAIL while the master still lists the dead
 * B's replicas and the port answers no more, or answers as a new process
 * that refuses the old capabilities) or the exact bytes, never other bytes,
 * and none takes long. The new B's first mount is refused while the master
 * still has the old one's segment (counted); once mounted, B's old keys
 * are misses and new puts work. With --disk-dir on B (offload on put), one
 * record is damaged on disk while B is down: B's restart scan drops it
 * (counted), so that key is a miss, and the intact records are re-adopted
 * and read back exact through A. Each case ends with the aftermath on A.
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
#include "disk_util.h"
#include "harness_after.h"
#include "tests/cmocka_main.h"

#define NKEYS 24
#define LEN   (64u * 1024u) /* under ENG_SLICE_MIN: one connection a transfer */
/* A read of the restarted peer's keys: a refused connection or a refused
 * capability fails at once; this bounds a stuck one well inside the
 * engine's 5 s I/O timeout. */
#define READ_BOUND_MS	H_BOUND_MS(2000)
#define RECOVER_MS	H_BOUND_MS(10000)
#define REFUSED		"lunar_master_errors_total{code=\"SEGMENT_ALREADY_EXISTS\"}"
#define XFER_FAILURES	"lunar_proxy_transfer_failures_total"
#define DROPPED_AT_SCAN "lunar_proxy_disk_dropped_at_scan_total"
#define DAMAGED		7 /* the key whose record is damaged */

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_b[H_SEG_NAME], disk_b[PATH_MAX];
static struct h_proc *master, *proxy_a, *proxy_b;
static int mport, mhttp, with_disk;
static struct h_after after;

static int start(int disk)
{
	with_disk = disk;
	mport = h_free_port();
	/* A client TTL the restart beats by far: the new B's first mount finds
	 * the old B's segment still there. */
	master = track(disk ? h_start_master("master", mport, "--client-ttl", "2s",
					     "--allocation-strategy", "local_first", "--offload",
					     "on_put", NULL)
			    : h_start_master("master", mport, "--client-ttl", "2s",
					     "--allocation-strategy", "local_first", NULL));
	if (!master)
		return -1;
	mhttp = http_port_of(master);
	h_named_sock(sock_a, "a");
	h_named_sock(sock_b, "b");
	snprintf(disk_b, sizeof(disk_b), "%s", h_path("disk-b"));
	/* --admin-calls: the aftermath's client removes by force. */
	proxy_a = track(h_start_proxy("proxyA", sock_a, mport, "--ping-interval", "100ms",
				      "--admin-calls", NULL));
	proxy_b = track(disk ? h_start_peer("proxyB", sock_b, mport, seg_b, "--ping-interval",
					    "100ms", "--admin-calls", "--disk-dir", disk_b,
					    "--disk-capacity", "64MiB", NULL)
			     : h_start_peer("proxyB", sock_b, mport, seg_b, "--ping-interval",
					    "100ms", "--admin-calls", NULL));
	return proxy_a && proxy_b ? 0 : -1;
}

static int setup_memory(void **state)
{
	return case_setup(state) ? -1 : start(0);
}

static int setup_disk(void **state)
{
	return case_setup(state) ? -1 : start(1);
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	return case_teardown(state);
}

/* B again, on the socket and data port of the one killed. */
static struct h_proc *restart_b(void)
{
	const char *port = strrchr(seg_b, ':') + 1;

	return track(with_disk
			 ? h_start_proxy("proxyB2", sock_b, mport, "--data-port", port,
					 "--ping-interval", "100ms", "--admin-calls", "--disk-dir",
					 disk_b, "--disk-capacity", "64MiB", NULL)
			 : h_start_proxy("proxyB2", sock_b, mport, "--data-port", port,
					 "--ping-interval", "100ms", "--admin-calls", NULL));
}

static void key_of(char key[64], const char *kind, int i)
{
	snprintf(key, 64, "fast/%s-%02d", kind, i);
}

/* The reader on A: B's keys round and round until stop. */
struct reader {
	struct lunar_client *c;
	atomic_int stop;
	int exact, not_found, xfer_fail, other, wrong;
	int64_t first_other;
	char first_wrong[64];
	uint64_t longest_ms;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	uint8_t *buf = malloc(LEN);
	char key[64];

	for (int i = 0; buf && !atomic_load(&r->stop); i++) {
		uint64_t t0 = h_now_ms(), ms;
		int64_t rc;

		key_of(key, "old", i % NKEYS);
		memset(buf, 0, LEN);
		rc = lunar_get_into(r->c, key, buf, LEN);
		ms = h_now_ms() - t0;
		if (ms > r->longest_ms)
			r->longest_ms = ms;
		if (rc == LEN && h_verify(buf, LEN, h_seed(key)) < 0) {
			r->exact++;
		} else if (rc >= 0) {
			if (r->wrong++ == 0)
				snprintf(r->first_wrong, sizeof(r->first_wrong), "%s", key);
		} else if (rc == LUNAR_ERR_OBJECT_NOT_FOUND) {
			r->not_found++;
		} else if (rc == LUNAR_ERR_TRANSFER_FAIL) {
			r->xfer_fail++;
		} else if (r->other++ == 0) {
			r->first_other = rc;
		}
		h_sleep_ms(2);
	}
	free(buf);
	return NULL;
}

static void reader_check(const struct reader *r)
{
	printf("  reader on A: %d exact, %d OBJECT_NOT_FOUND, %d TRANSFER_FAIL, %d other, %d "
	       "wrong; the longest read %llu ms\n",
	       r->exact, r->not_found, r->xfer_fail, r->other, r->wrong,
	       (unsigned long long)r->longest_ms);
	H_ASSERT_MSG(r->wrong == 0, "%d reads returned other bytes, first of %s", r->wrong,
		     r->first_wrong);
	H_ASSERT_MSG(r->other == 0, "%d reads failed otherwise, first with %lld (%s)", r->other,
		     (long long)r->first_other, h_code(r->first_other));
	H_ASSERT_MSG(r->longest_ms <= READ_BOUND_MS, "a read took %llu ms",
		     (unsigned long long)r->longest_ms);
	H_ASSERT_MSG(r->xfer_fail + r->not_found > 0, "the reader never missed: no test");
}

/* A reads one value of B's segment, so that it holds its one pooled data
 * connection to B before the aftermath's baseline, as it will at the end
 * (to the new B: the old one's connection dies with it). */
static void warm_up(struct lunar_client *ca, struct lunar_client *cb, uint8_t *buf)
{
	put_seeded(cb, "fast/warm", buf, LEN, 1, NULL);
	check_seeded(ca, "fast/warm", buf, LEN, 1);
	H_ASSERT_EQ(lunar_remove(cb, "fast/warm", 1), 0);
}

/* Wait until the disk tier of the proxy on http holds want records. */
static void wait_disk_records(int http, int64_t want)
{
	uint64_t end = h_now_ms() + RECOVER_MS;
	int64_t n;

	while ((n = h_metric_sum(http, "lunar_proxy_disk_records")) != want && h_now_ms() < end)
		h_sleep_ms(20);
	H_ASSERT_MSG(n == want, "%lld records on B's disk, want %lld", (long long)n,
		     (long long)want);
}

/* Reads of B's old keys through c until every one reads as it should
 * (exact, or a miss when it is the damaged one, or any key without a
 * disk): the last code of the first key that does not. */
static int64_t settled(struct lunar_client *c, uint8_t *buf, char key[64])
{
	for (int i = 0; i < NKEYS; i++) {
		int64_t rc;

		key_of(key, "old", i);
		rc = lunar_get_into(c, key, buf, LEN);
		if (rc == LEN)
			H_ASSERT_MSG(h_verify(buf, LEN, h_seed(key)) < 0, "%s: other bytes", key);
		if (rc != (with_disk && i != DAMAGED ? (int64_t)LEN : LUNAR_ERR_OBJECT_NOT_FOUND))
			return rc;
	}
	return 0;
}

static void restart_fast(void)
{
	struct lunar_client *ca, *cb;
	struct reader r = {0};
	uint8_t *buf = malloc(LEN);
	int64_t refused, xfails, rc = -1;
	uint64_t t_kill, end;
	pthread_t th;
	char key[64];

	H_ASSERT(buf != NULL);
	ca = h_client(sock_a);
	cb = h_client(sock_b);
	warm_up(ca, cb, buf);
	lunar_close(ca);
	h_after_begin(&after, sock_a, proxy_a, mhttp);
	ca = h_client(sock_a);
	for (int i = 0; i < NKEYS; i++) {
		key_of(key, "old", i);
		put_seeded(cb, key, buf, LEN, h_seed(key), NULL);
		check_seeded(ca, key, buf, LEN, h_seed(key)); /* leased, cached on A */
	}
	lunar_close(cb);
	if (with_disk)
		wait_disk_records(http_port_of(proxy_b), NKEYS);
	refused = h_metric_sum(mhttp, REFUSED);
	xfails = h_metric_sum(http_port_of(proxy_a), XFER_FAILURES);
	H_ASSERT(refused >= 0 && xfails >= 0);

	r.c = h_client(sock_a);
	H_ASSERT_EQ(pthread_create(&th, NULL, reader_main, &r), 0);
	h_sleep_ms(200);
	t_kill = h_now_ms();
	h_kill(proxy_b);
	key_of(key, "old", DAMAGED);
	if (with_disk)
		H_ASSERT_EQ(d_corrupt_record(disk_b, "default", key), 0);
	proxy_b = restart_b();
	if (proxy_b) /* ...a little more of the reads */
		h_sleep_ms(300);
	atomic_store(&r.stop, 1);
	pthread_join(th, NULL);
	lunar_close(r.c);
	H_ASSERT_MSG(proxy_b != NULL, "B did not start again");
	printf("  B back and mounted %llu ms after the kill\n",
	       (unsigned long long)(h_now_ms() - t_kill));
	reader_check(&r);
	H_ASSERT_MSG(h_metric_sum(mhttp, REFUSED) > refused,
		     "the new B's first mount was not refused: no fast restart");
	H_ASSERT_MSG(h_metric_sum(http_port_of(proxy_a), XFER_FAILURES) > xfails,
		     "A counted no failed transfer to the dead B");

	/* Settled: the memory copies are gone with the old B; the disk
	 * records come back once the new B has registered them. */
	for (end = h_now_ms() + RECOVER_MS; h_now_ms() < end; h_sleep_ms(100))
		if ((rc = settled(ca, buf, key)) == 0)
			break;
	H_ASSERT_MSG(rc == 0, "%s after B's restart: %lld (%s)", key, (long long)rc, h_code(rc));
	cb = h_client(sock_b);
	H_ASSERT_EQ(settled(cb, buf, key), 0);
	if (with_disk) {
		int bhttp = http_port_of(proxy_b);

		H_ASSERT_EQ(h_metric_sum(bhttp, DROPPED_AT_SCAN), 1);
		H_ASSERT_EQ(h_metric_sum(bhttp, "lunar_proxy_disk_records"), NKEYS - 1);
	}
	/* New values in the new B read back through A. */
	for (int i = 0; i < NKEYS; i++) {
		key_of(key, "new", i);
		put_seeded(cb, key, buf, LEN, h_seed(key), NULL);
		check_seeded(ca, key, buf, LEN, h_seed(key));
	}
	for (int i = 0; i < NKEYS; i++) {
		key_of(key, "new", i);
		H_ASSERT_EQ(lunar_remove(cb, key, 1), 0);
		key_of(key, "old", i);
		rc = lunar_remove(cb, key, 1);
		H_ASSERT_MSG(rc == 0 || rc == LUNAR_ERR_OBJECT_NOT_FOUND, "remove %s = %lld (%s)",
			     key, (long long)rc, h_code(rc));
	}
	lunar_close(ca);
	lunar_close(cb);
	h_after_end(&after);
	free(buf);
}

static void test_faults_restart_fast_memory(void **state)
{
	(void)state;
	restart_fast();
}

static void test_faults_restart_fast_disk_checksums(void **state)
{
	(void)state;
	restart_fast();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_faults_restart_fast_memory, setup_memory,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_faults_restart_fast_disk_checksums, setup_disk,
					    teardown),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
