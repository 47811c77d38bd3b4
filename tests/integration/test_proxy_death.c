/*
 * test_proxy_death.c - a proxy that dies (SPEC §3 client liveness, §5.7).
 * Master with --client-ttl 2s, proxies A and B. Objects with one replica each
 * are written through A, every other one preferring A's segment (the others
 * go ahead into reserved space, on A or B: all on B when the one
 * reservation they fit in landed there), so some live only on A; then A is
 * SIGKILLed. A's client fails fast with PROXY_UNAVAILABLE instead of hanging;
 * B never returns wrong bytes, and once the master has dropped A, every object
 * reads byte-exact or OBJECT_NOT_FOUND. Restarting A, the old handle
 * reconnects by itself.
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

#define NOBJ	      40
#define OBJ_LEN(i)    (64u * 1024u + (size_t)(i)*1031u)
#define MAX_LEN	      (OBJ_LEN(NOBJ) + 4096)
#define CLIENT_TTL_MS 2000
/* B's client timeout, and the longest one read through B may take: a read of
 * an object on the dead proxy must fail, not wait out a long timeout. */
#define B_TIMEOUT_MS  3000
#define B_READ_MAX_MS 2500

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_a[H_SEG_NAME];
static int master_port;
static struct h_proc *proxy_a;
static struct lunar_client *ca, *cb;
static uint64_t killed_at;

static int setup(void **state)
{
	(void)state;
	if (!h_cluster_master(&master_port, "--client-ttl", "2s", NULL))
		return -1;
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	proxy_a =
	    h_start_peer("proxyA", sock_a, master_port, seg_a, "--segment-size", "64MiB", NULL);
	if (!proxy_a ||
	    !h_start_proxy("proxyB", sock_b, master_port, "--segment-size", "64MiB", NULL))
		return -1;
	ca = h_client_try(sock_a, H_CLIENT_TIMEOUT_MS, NULL);
	cb = h_client_try(sock_b, B_TIMEOUT_MS, NULL);
	return ca && cb ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	lunar_close(ca);
	lunar_close(cb);
	ca = cb = NULL;
	h_cleanup();
	return 0;
}

static void obj_key(int i, char *key, size_t len)
{
	snprintf(key, len, "proxy-death/obj-%02d", i);
}

/*
 * Reads object i through B. Wrong bytes always fail the test; returns the
 * get's result (the size on success) for the caller to judge.
 */
static int64_t read_object(int i, uint8_t *buf, const char *when)
{
	size_t len = OBJ_LEN(i);
	char key[64];
	uint64_t t0, took;
	int64_t got, bad;

	obj_key(i, key, sizeof(key));
	memset(buf, 0, MAX_LEN);
	t0 = h_now_ms();
	got = lunar_get_into(cb, key, buf, MAX_LEN);
	took = h_now_ms() - t0;
	H_ASSERT_MSG(took <= B_READ_MAX_MS, "%s: get %s took %llu ms (result %lld, %s)", when, key,
		     (unsigned long long)took, (long long)got, h_code(got));
	if (got < 0)
		return got;
	H_ASSERT_MSG(got == (int64_t)len, "%s: %s read %lld bytes, put %zu", when, key,
		     (long long)got, len);
	bad = h_verify(buf, len, h_seed(key));
	H_ASSERT_MSG(bad < 0, "%s: %s wrong at byte %lld", when, key, (long long)bad);
	return got;
}

static void test_proxy_death_client_fails_fast(void **state)
{
	const char *pref[1] = {seg_a};
	const struct lunar_put_cfg one = {.replica_num = 1}, on_a = {.replica_num = 1,
								     .preferred_segments = pref,
								     .preferred_count = 1};
	uint8_t *buf = malloc(MAX_LEN);
	uint64_t t0, took;
	char key[64];
	int rc;

	(void)state;
	H_ASSERT(buf != NULL);
	for (int i = 0; i < NOBJ; i++) {
		obj_key(i, key, sizeof(key));
		h_fill(buf, OBJ_LEN(i), h_seed(key));
		H_ASSERT_EQ(lunar_put(ca, key, buf, OBJ_LEN(i), i % 2 ? &one : &on_a), 0);
	}
	for (int i = 0; i < NOBJ; i++)
		H_ASSERT_EQ(read_object(i, buf, "before the kill"), OBJ_LEN(i));

	h_kill(proxy_a);
	killed_at = h_now_ms();
	t0 = h_now_ms();
	obj_key(0, key, sizeof(key));
	rc = lunar_exists(ca, key);
	took = h_now_ms() - t0;
	H_ASSERT_EQ(rc, LUNAR_ERR_PROXY_UNAVAILABLE);
	H_ASSERT_MSG(took <= 2000, "PROXY_UNAVAILABLE took %llu ms", (unsigned long long)took);
	/* And again: the reconnect attempt fails fast too. */
	t0 = h_now_ms();
	rc = lunar_get_into(ca, key, buf, MAX_LEN);
	took = h_now_ms() - t0;
	H_ASSERT_EQ(rc, LUNAR_ERR_PROXY_UNAVAILABLE);
	H_ASSERT_MSG(took <= 2000, "second call took %llu ms", (unsigned long long)took);
	H_ASSERT_EQ(lunar_health(ca), 1);
	free(buf);
}

static void test_proxy_death_b_never_returns_wrong_bytes(void **state)
{
	uint8_t *buf = malloc(MAX_LEN);
	int ok = 0, failed = 0;

	(void)state;
	H_ASSERT(buf != NULL);
	H_ASSERT(killed_at != 0);
	/* Before the TTL: A's objects may fail any way, but never with bad bytes. */
	for (int i = 0; i < NOBJ; i++) {
		if (read_object(i, buf, "before the TTL") >= 0)
			ok++;
		else
			failed++;
	}
	print_message("before the TTL: %d read, %d failed\n", ok, failed);
	free(buf);
}

/* One pass over every object: counts found and not-found, and names the
 * first other error in *other_rc (0 if none). */
static void after_ttl_pass(uint8_t *buf, int *found, int *missing, int64_t *other_rc,
			   int *other_idx)
{
	*found = *missing = 0;
	*other_rc = 0;
	*other_idx = -1;
	for (int i = 0; i < NOBJ; i++) {
		int64_t got = read_object(i, buf, "after the TTL");

		if (got >= 0)
			(*found)++;
		else if (got == LUNAR_ERR_OBJECT_NOT_FOUND)
			(*missing)++;
		else if (*other_idx < 0) {
			*other_rc = got;
			*other_idx = i;
		}
	}
}

static void test_proxy_death_after_ttl_found_or_not_found(void **state)
{
	uint8_t *buf = malloc(MAX_LEN);
	int found, missing, other_idx;
	int64_t other_rc;

	(void)state;
	H_ASSERT(buf != NULL);
	H_ASSERT(killed_at != 0);
	while (h_now_ms() < killed_at + CLIENT_TTL_MS + 1500)
		h_sleep_ms(50);
	/* The master's sweep may lag the TTL a little: allow a grace period. */
	for (;;) {
		after_ttl_pass(buf, &found, &missing, &other_rc, &other_idx);
		if ((other_idx < 0 && missing > 0) || h_now_ms() > killed_at + 8000)
			break;
		h_sleep_ms(250);
	}
	print_message("%llu ms after the kill: %d found, %d not found\n",
		      (unsigned long long)(h_now_ms() - killed_at), found, missing);
	H_ASSERT_MSG(other_idx < 0, "object %d: %lld (%s), expected bytes or OBJECT_NOT_FOUND",
		     other_idx, (long long)other_rc, h_code(other_rc));
	H_ASSERT_MSG(missing > 0, "all %d objects survived A's death: none lived only on A", NOBJ);
	free(buf);
}

static void test_proxy_death_client_reconnects_after_restart(void **state)
{
	const char *key = "proxy-death/after-restart";
	uint8_t *buf = malloc(MAX_LEN);
	uint64_t deadline;
	int health = -1;

	(void)state;
	H_ASSERT(buf != NULL);
	proxy_a = h_start_proxy("proxyA-2", sock_a, master_port, "--segment-size", "64MiB", NULL);
	H_ASSERT_MSG(proxy_a != NULL, "proxy A did not restart");
	/* The old handle must find the new proxy on its own. */
	deadline = h_now_ms() + 10000;
	while (h_now_ms() < deadline) {
		health = lunar_health(ca);
		if (health == 0)
			break;
		h_sleep_ms(100);
	}
	H_ASSERT_EQ(health, 0);
	h_fill(buf, 100000, h_seed(key));
	H_ASSERT_EQ(lunar_put(ca, key, buf, 100000, NULL), 0);
	memset(buf, 0, MAX_LEN);
	H_ASSERT_EQ(lunar_get_into(ca, key, buf, MAX_LEN), 100000);
	H_ASSERT(h_verify(buf, 100000, h_seed(key)) < 0);
	memset(buf, 0, MAX_LEN);
	H_ASSERT_EQ(lunar_get_into(cb, key, buf, MAX_LEN), 100000);
	H_ASSERT(h_verify(buf, 100000, h_seed(key)) < 0);
	free(buf);
}

LUNAR_TEST_MAIN(setup, teardown, test_proxy_death_client_fails_fast,
		test_proxy_death_b_never_returns_wrong_bytes,
		test_proxy_death_after_ttl_found_or_not_found,
		test_proxy_death_client_reconnects_after_restart)
