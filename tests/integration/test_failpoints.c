/*
 * test_failpoints.c - faults only a failpoint reaches (common/failpoint.h),
 * against the lunar-proxy `make failpoints` builds into
 * $BUILD/failpoints/bin (skipped, saying so, when it is missing). The
 * failpoints are armed while the proxy runs, through the file
 * $LUNAR_FAILPOINTS_FILE names. Allocations failing on the proxy's hot
 * paths (decoding a request, starting a put) fail that call with
 * INTERNAL_ERROR and nothing else: the client stays connected, its next
 * call works, no abort, the aftermath holds. A PutEnd that never reached
 * the master, a PutStart whose answer was lost, and a PutEnd the master
 * refused key by key (as a leader whose fence lapsed) fail the put and
 * leave no key behind: the put again works and reads back. So does a
 * PutStart that names more replicas than the put asked for. And the SSD tier dying between
 * a record's data and its metadata, or halfway through the metadata: on
 * restart the intact records are recovered and read back byte-exact, the
 * torn one is dropped and counted, the half-written objects never appear.
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
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case_util.h"
#include "harness_after.h"

#define LEN	   (256u * 1024u)
#define RECORDS	   "lunar_proxy_disk_records"
#define DROPPED	   "lunar_proxy_disk_dropped_at_scan_total"
#define OFFLOADS   "lunar_proxy_disk_offloads_total"
#define VIOLATIONS "lunar_proxy_client_violations_total"

static char sock[PATH_MAX], fpfile[PATH_MAX], disk_dir[PATH_MAX];
static struct h_proc *proxy;
static int http;
static struct h_after after;

static void arm(const char *spec)
{
	case_arm(fpfile, spec, 60);
}

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	case_failpoints(fpfile, "failpoints");
	snprintf(disk_dir, sizeof(disk_dir), "%s", h_path("disk"));
	h_named_sock(sock, "fp");
	return 0;
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	return case_teardown(state);
}

/* A proxy with an SSD tier (offload on put), or without (disk_dir NULL). */
static struct h_proc *start(const char *name, const char *dir)
{
	proxy = track(dir ? h_start_proxy(name, sock, H_EMBEDDED, "--segment-size", "32MiB",
					  "--disk-dir", dir, "--disk-capacity", "64MiB",
					  "--offload", "on_put", "--ping-interval", "100ms", NULL)
			  : h_start_proxy(name, sock, H_EMBEDDED, "--segment-size", "32MiB", NULL));
	H_ASSERT(proxy != NULL);
	http = http_port_of(proxy);
	return proxy;
}

/* --- allocation failures on the hot paths --- */

static void test_failpoints_alloc_fails_one_call(void **state)
{
	static uint8_t v[3][4096];
	const char *keys[3] = {"fp/b0", "fp/b1", "fp/b2"};
	struct iovec iov[3];
	const struct iovec *iovs[3] = {&iov[0], &iov[1], &iov[2]};
	int cnt[3] = {1, 1, 1}, res[3];
	struct lunar_client *c;
	int64_t viol;

	(void)state;
	start("proxy", NULL);
	h_after_begin(&after, sock, proxy, http);
	viol = h_metric_sum(http, VIOLATIONS);
	c = h_client(sock);
	h_after_pause(&after); /* only our calls meet the failpoints */
	arm("proxy-decode-alloc=3*return");
	for (int i = 0; i < 3; i++)
		H_ASSERT_EQ(lunar_put(c, "fp/a", "x", 1, NULL), LUNAR_ERR_INTERNAL);
	H_ASSERT_EQ(lunar_put(c, "fp/a", "x", 1, NULL), 0);
	H_ASSERT_EQ(lunar_exists(c, "fp/a"), 1);
	arm("proxy-put-alloc=2*return");
	H_ASSERT_EQ(lunar_put(c, "fp/c", "y", 1, NULL), LUNAR_ERR_INTERNAL);
	for (int i = 0; i < 3; i++)
		iov[i] = (struct iovec){v[i], sizeof(v[i])};
	H_ASSERT_EQ(lunar_batch_put(c, 3, keys, iovs, cnt, NULL, res), 0);
	for (int i = 0; i < 3; i++)
		H_ASSERT_EQ(res[i], LUNAR_ERR_INTERNAL);
	H_ASSERT_EQ(lunar_exists(c, "fp/c"), 0);
	H_ASSERT_EQ(lunar_batch_put(c, 3, keys, iovs, cnt, NULL, res), 0);
	for (int i = 0; i < 3; i++)
		H_ASSERT_EQ(res[i], 0);
	arm("");
	H_ASSERT_EQ(lunar_health(c), 0);
	H_ASSERT(h_alive(proxy));
	H_ASSERT_EQ(h_metric_sum(http, VIOLATIONS), viol);
	H_ASSERT(lunar_remove_by_regex(c, "^fp/", 1) == 4);
	h_after_resume(&after);
	lunar_close(c);
	h_after_end(&after);
}

/* --- a PutEnd lost on its way --- */

static void test_failpoints_lost_put_end_leaves_no_key(void **state)
{
	uint8_t *buf = malloc(LEN);
	struct lunar_client *c;
	int rc;

	(void)state;
	H_ASSERT(buf != NULL);
	start("proxy", NULL);
	c = h_client(sock);
	arm("proxy-put-end=1*return");
	h_fill(buf, LEN, h_seed("fp/end"));
	rc = lunar_put(c, "fp/end", buf, LEN, NULL);
	H_ASSERT_MSG(rc < 0, "a put whose PutEnd was lost gave %d", rc);
	arm("");
	/* Not "already there" (PROCESSING, never to be read): put for real. */
	H_ASSERT_EQ(lunar_exists(c, "fp/end"), 0);
	put_seeded(c, "fp/end", buf, LEN, h_seed("fp/end"), NULL);
	H_ASSERT_EQ(lunar_exists(c, "fp/end"), 1);
	check_seeded(c, "fp/end", buf, LEN, h_seed("fp/end"));
	lunar_close(c);
	free(buf);
}

/* --- a PutStart's answer lost, a PutEnd refused key by key --- */

/* A put that failed as fp had it leaves no key: the put again (for real,
 * not "already there") works and reads back. */
static void put_fails_then_works(struct lunar_client *c, const char *fp, const char *key,
				 uint8_t *buf)
{
	int rc;

	arm(fp);
	h_fill(buf, LEN, h_seed(key));
	rc = lunar_put(c, key, buf, LEN, NULL);
	H_ASSERT_MSG(rc < 0, "a put under %s gave %d", fp, rc);
	arm("");
	H_ASSERT_EQ(lunar_exists(c, key), 0);
	put_seeded(c, key, buf, LEN, h_seed(key), NULL);
	H_ASSERT_EQ(lunar_exists(c, key), 1);
	check_seeded(c, key, buf, LEN, h_seed(key));
}

static void test_failpoints_lost_put_start_leaves_no_key(void **state)
{
	uint8_t *buf = malloc(LEN);
	struct lunar_client *c;

	(void)state;
	H_ASSERT(buf != NULL);
	start("proxy", NULL);
	c = h_client(sock);
	put_fails_then_works(c, "proxy-put-start=1*return", "fp/start", buf);
	put_fails_then_works(c, "master-put-end=1*return", "fp/refused", buf);
	lunar_close(c);
	free(buf);
}

/* --- a master naming more replicas than a put asked for --- */

/* Each replica the master names is a write of the proxy's: one more than
 * asked for (master-extra-replica, on a master with two segments to place
 * on) fails the put, PROTOCOL_ERROR, and leaves no key; before, the proxy
 * wrote every one and the put returned 0. */
static void test_failpoints_extra_replica_refused(void **state)
{
	char sock_b[PATH_MAX], seg[2][H_SEG_NAME];
	int mport = h_free_port();
	uint8_t *buf = malloc(LEN);
	struct lunar_client *c;
	int rc;

	(void)state;
	H_ASSERT(buf != NULL);
	H_ASSERT(track(h_start_master("master", mport, NULL)) != NULL);
	h_named_sock(sock_b, "b");
	/* no reservations: every put asks the master where to go */
	H_ASSERT(track(h_start_peer("proxyA", sock, mport, seg[0], "--segment-size", "32MiB",
				    "--reserve-size", "0", NULL)) != NULL);
	H_ASSERT(track(h_start_peer("proxyB", sock_b, mport, seg[1], "--segment-size", "32MiB",
				    "--reserve-size", "0", NULL)) != NULL);
	c = h_client(sock);
	arm("master-extra-replica=1*return");
	h_fill(buf, LEN, h_seed("fp/extra"));
	rc = lunar_put(c, "fp/extra", buf, LEN, NULL);
	arm("");
	H_ASSERT_MSG(rc == LUNAR_ERR_PROTOCOL, "a put placed on 2 replicas of 1 gave %d (%s)", rc,
		     h_code(rc));
	H_ASSERT_EQ(lunar_exists(c, "fp/extra"), 0);
	put_seeded(c, "fp/extra", buf, LEN, h_seed("fp/extra"), NULL);
	check_seeded(c, "fp/extra", buf, LEN, h_seed("fp/extra"));
	lunar_close(c);
	free(buf);
}

/* --- the SSD tier dying inside a write --- */

static void put_and_offload(struct lunar_client *c, const char *key, uint8_t *buf)
{
	int64_t n = h_metric_sum(http, OFFLOADS);
	uint64_t end = h_now_ms() + 10000;

	put_seeded(c, key, buf, LEN, h_seed(key), NULL);
	while (h_metric_sum(http, OFFLOADS) <= n && h_now_ms() < end)
		h_sleep_ms(10);
	H_ASSERT_MSG(h_metric_sum(http, OFFLOADS) > n, "%s never reached the disk", key);
}

/* Arm fp, put key: the proxy dies writing its SSD copy. */
static void crash_writing(struct lunar_client *c, const char *fp, const char *key, uint8_t *buf)
{
	int status;

	arm(fp);
	h_fill(buf, LEN, h_seed(key));
	lunar_put(c, key, buf, LEN, NULL); /* committed in DRAM, or not: the proxy dies */
	status = h_wait_exit(proxy, 10000);
	H_ASSERT_MSG(status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		     "%s: the proxy did not die by its failpoint (status 0x%x)", fp, status);
	lunar_close(c);
	arm("");
}

/* A fresh proxy on the same disk: what the restart scan recovered. */
static struct lunar_client *restart(const char *name, int64_t records, int64_t dropped)
{
	struct lunar_client *c;

	start(name, disk_dir);
	H_ASSERT_EQ(h_metric_sum(http, RECORDS), records);
	H_ASSERT_EQ(h_metric_sum(http, DROPPED), dropped);
	c = h_client(sock);
	return c;
}

static void check_intact(struct lunar_client *c, uint8_t *buf)
{
	char key[32];

	for (int i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "fp/disk-%d", i);
		check_seeded(c, key, buf, LEN, h_seed(key));
	}
}

static void test_failpoints_disk_crash_mid_record(void **state)
{
	uint8_t *buf = malloc(LEN);
	struct lunar_client *c;
	char key[32];

	(void)state;
	H_ASSERT(buf != NULL);
	start("proxy1", disk_dir);
	c = h_client(sock);
	for (int i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "fp/disk-%d", i);
		put_and_offload(c, key, buf);
	}
	/* Data written, no record: nothing to recover, nothing torn. */
	crash_writing(c, "disk-crash-before-meta=1*return", "fp/no-record", buf);
	c = restart("proxy2", 3, 0);
	check_intact(c, buf);
	H_ASSERT_EQ(lunar_exists(c, "fp/no-record"), 0);
	/* A record whose second half never landed: dropped, and counted. */
	crash_writing(c, "disk-torn-meta=1*return", "fp/torn", buf);
	c = restart("proxy3", 3, 1);
	/* One more object on disk first: the open bucket's files are part of
	 * the baseline, as the aftermath client's puts go there too. */
	put_and_offload(c, "fp/warm", buf);
	H_ASSERT_EQ(lunar_remove(c, "fp/warm", 1), 0);
	lunar_close(c);
	h_after_begin(&after, sock, proxy, http);
	c = h_client(sock);
	check_intact(c, buf);
	H_ASSERT_EQ(lunar_exists(c, "fp/torn"), 0);
	lunar_close(c);
	h_after_end(&after);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_failpoints_alloc_fails_one_call, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failpoints_lost_put_end_leaves_no_key, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_failpoints_lost_put_start_leaves_no_key, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_failpoints_extra_replica_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failpoints_disk_crash_mid_record, setup, teardown),
	};
	/* Every daemon the harness starts here is the failpoint build's. */
	int rc = h_failpoint_build("lunar-proxy");

	return rc ? rc : cmocka_run_group_tests(tests, NULL, NULL);
}
