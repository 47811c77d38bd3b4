/*
 * test_owner_remount.c - a proxy's own write to its segment, granted by the
 * master and then held back before its copy (engine-local-write=sleep, the
 * failpoint build's lunar-proxy), while the proxy stalls past --client-ttl
 * (SIGSTOP) and re-mounts. The master forgot the write with the segment, and
 * places a new value (put through a proxy without a segment) where it was
 * going: when the held copy resumes it must fail, not land on the new
 * value, which reads back byte-exact. And a reservation whose Reserve read
 * the segment's mount epoch before a re-mount's fence and was granted after
 * it (proxy-reserve=sleep holds the Reserve back while the master stalls
 * and B re-mounts) is retired as it comes and another asked for, so no put
 * takes a piece of it: that piece's write would copy nothing and the put
 * take the two calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>

#include "case_util.h"
#include "harness.h"
#include "lunar.h"

#define VAL_LEN	 (4u * 1024u * 1024u)
#define HOLD_MS	 H_BOUND_MS(4000) /* longer than a stall past the TTL and a re-mount */
#define WAIT_MS	 H_BOUND_MS(10000)
#define CLIENTS	 "lunar_master_clients"
#define REMOUNTS "lunar_master_calls_total{method=\"ReMountSegment\"}"
#define STARTS	 "lunar_master_calls_total{method=\"BatchPutStart\"}"
#define RESERVES "lunar_master_calls_total{method=\"Reserve\"}"
#define PUTS	 20 /* small puts after the re-mount */

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_b[H_SEG_NAME], fpfile[PATH_MAX];
static const char *seg_b_only[1] = {seg_b};
static const struct lunar_put_cfg on_b = {
    .replica_num = 1, .preferred_segments = seg_b_only, .preferred_count = 1};

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	case_failpoints(fpfile, "failpoints");
	return 0;
}

/* B's own put, on a thread of its own: B holds its copy back. */
struct owner_put {
	uint8_t *buf;
	int rc;
};

static void *owner_put_main(void *arg)
{
	struct owner_put *p = arg;
	struct lunar_client *c = h_client(sock_b);

	p->rc = lunar_put(c, "owner-remount/held", p->buf, VAL_LEN, &on_b);
	lunar_close(c);
	return NULL;
}

/* Wait until sample on the master's port is at least want. */
static void wait_metric(int port, const char *sample, int64_t want, const char *what)
{
	uint64_t end = h_now_ms() + WAIT_MS;

	while (metric(port, sample) < want) {
		H_ASSERT_MSG(h_now_ms() < end, "%s in %d ms", what, WAIT_MS);
		h_sleep_ms(20);
	}
}

static void test_owner_remount_held_local_write_does_not_land(void **state)
{
	static struct owner_put held; /* its thread outlives a failed assertion */
	const char *new_key = "owner-remount/new";
	int mport = h_free_port(), mhttp;
	struct h_proc *master, *proxy_b;
	struct lunar_client *ca;
	int64_t mounts;
	uint64_t end, held_until;
	char spec[64];
	uint8_t *val = malloc(VAL_LEN);
	pthread_t th;

	(void)state;
	held.buf = malloc(VAL_LEN);
	H_ASSERT(val && held.buf);
	h_fill(held.buf, VAL_LEN, h_seed("owner-remount/held"));
	h_fill(val, VAL_LEN, h_seed(new_key));
	master = track(h_start_master("master", mport, "--client-ttl", "1s", NULL));
	H_ASSERT(master != NULL);
	mhttp = http_port_of(master);
	h_named_sock(sock_b, "b");
	h_named_sock(sock_a, "a");
	proxy_b = track(h_start_peer("proxyB", sock_b, mport, seg_b, "--segment-size", "64MiB",
				     "--reserve-size", "0", "--ping-interval", "100ms", NULL));
	H_ASSERT(proxy_b != NULL);
	/* No reservations: each value is the first range of an empty segment. */
	H_ASSERT(track(h_start_proxy("proxyA", sock_a, mport, "--segment-size", "0",
				     "--reserve-size", "0", "--ping-interval", "100ms", NULL)) !=
		 NULL);
	ca = h_client(sock_a);

	/* B's put is granted the empty segment's first range, then held. */
	snprintf(spec, sizeof(spec), "engine-local-write=sleep(%d)", HOLD_MS);
	case_arm(fpfile, spec, 60);
	held.rc = 1;
	held_until = h_now_ms() + HOLD_MS;
	H_ASSERT_EQ(pthread_create(&th, NULL, owner_put_main, &held), 0);
	H_ASSERT_EQ(h_wait_log(proxy_b, "engine-local-write fired", WAIT_MS), 0);
	case_arm(fpfile, "", 60);

	/* B stalls until the master declares it dead, then re-mounts. */
	mounts = metric(mhttp, REMOUNTS);
	end = h_now_ms() + WAIT_MS;
	H_ASSERT_EQ(kill(-proxy_b->pid, SIGSTOP), 0);
	while (metric(mhttp, CLIENTS) > 1) {
		if (h_now_ms() >= end)
			kill(-proxy_b->pid, SIGCONT);
		H_ASSERT_MSG(h_now_ms() < end, "the master did not declare B dead");
		h_sleep_ms(20);
	}
	H_ASSERT_EQ(kill(-proxy_b->pid, SIGCONT), 0);
	wait_metric(mhttp, REMOUNTS, mounts + 1, "B did not re-mount");

	/* The new value goes to the re-mounted segment's first range. */
	H_ASSERT_EQ(lunar_put(ca, new_key, val, VAL_LEN, &on_b), 0);
	/* Else the held copy ran before the new value came: nothing tested. */
	H_ASSERT_MSG(h_now_ms() < held_until, "the new value came after the held copy ran");
	pthread_join(th, NULL);
	print_message("the held put: %d (%s)\n", held.rc, h_code(held.rc));
	H_ASSERT_MSG(held.rc != 0, "a put the master forgot was committed");
	h_expect_seeded(ca, new_key, VAL_LEN, h_seed(new_key));
	lunar_close(ca);
	free(val);
	free(held.buf);
}

/* n 4 KiB puts of keys prefix/i from c, each 0; read back by the caller. */
static void small_puts(struct lunar_client *c, const char *prefix, int n)
{
	uint8_t val[4096];
	char key[64];

	for (int i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "%s/%d", prefix, i);
		h_fill(val, sizeof(val), h_seed(key));
		H_ASSERT_EQ(lunar_put(c, key, val, sizeof(val), NULL), 0);
	}
}

static void test_owner_remount_reservation_of_old_epoch_retired(void **state)
{
	int mport = h_free_port(), mhttp;
	struct h_proc *master, *proxy_b;
	struct lunar_client *cb;
	int64_t mounts, starts;
	char key[64], spec[64];

	(void)state;
	/* Reservations live long past the held Reserve. */
	master = track(h_start_master("master", mport, "--reserve-ttl", "60s", NULL));
	H_ASSERT(master != NULL);
	mhttp = http_port_of(master);
	h_named_sock(sock_b, "b");
	/* B asks for a reservation as it starts: its Reserve is held back
	 * with the epoch it read. */
	snprintf(spec, sizeof(spec), "proxy-reserve=sleep(%d)", H_BOUND_MS(5000));
	case_arm(fpfile, spec, 0);
	proxy_b = track(h_start_peer("proxyB", sock_b, mport, seg_b, "--segment-size", "64MiB",
				     "--ping-interval", "100ms", "--rpc-timeout", "300ms", NULL));
	H_ASSERT(proxy_b != NULL);
	H_ASSERT_EQ(h_wait_log(proxy_b, "proxy-reserve fired", WAIT_MS), 0);
	case_arm(fpfile, "", 60);
	cb = h_client(sock_b);

	/* The master stalls past B's --rpc-timeout: B re-mounts (a no-op,
	 * the master still has its segment), fencing, before the Reserve
	 * leaves. */
	mounts = metric(mhttp, REMOUNTS);
	H_ASSERT_EQ(h_stop_group(master), 0);
	h_sleep_ms(800);
	H_ASSERT_EQ(kill(-master->pid, SIGCONT), 0);
	wait_metric(mhttp, REMOUNTS, mounts + 1, "B did not re-mount");
	H_ASSERT_MSG(metric(mhttp, RESERVES) == 0, "the Reserve left before the re-mount");
	/* The grant of the old epoch is retired as it comes, and another
	 * asked for at once, before any put takes a piece of it. */
	wait_metric(mhttp, RESERVES, 2, "the reservation of the old epoch was not replaced");

	/* So no put's write to B's segment fails for its epoch and takes the
	 * two calls instead (the first put or two may, while B links the new
	 * grant the master has just counted; with the old one in use all
	 * did). */
	starts = metric(mhttp, STARTS);
	small_puts(cb, "resv-epoch/after", PUTS);
	print_message("two-call puts of %d after the re-mount: %lld\n", PUTS,
		      (long long)(metric(mhttp, STARTS) - starts));
	H_ASSERT_MSG(metric(mhttp, STARTS) - starts <= 2,
		     "puts took the two calls: a reservation of the old epoch was used");
	for (int i = 0; i < PUTS; i++) {
		snprintf(key, sizeof(key), "resv-epoch/after/%d", i);
		h_expect_seeded(cb, key, 4096, h_seed(key));
	}
	lunar_close(cb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_owner_remount_held_local_write_does_not_land,
					    setup, case_teardown),
	    cmocka_unit_test_setup_teardown(test_owner_remount_reservation_of_old_epoch_retired,
					    setup, case_teardown),
	};
	/* Every daemon the harness starts here is the failpoint build's. */
	int rc = h_failpoint_build("lunar-proxy");

	return rc ? rc : cmocka_run_group_tests(tests, NULL, NULL);
}
