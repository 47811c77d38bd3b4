/*
 * test_leases.c - read leases end to end, on real processes:
 * the proxy's lease cache serves a hot key with no master call, and holds
 * as many keys as --lease-cache-keys says; a cached
 * replica list made stale by a forced remove on another node is caught by
 * the CRC32C check and never passes another object's bytes off as the key's;
 * a lease refuses an unforced remove (and remove_all skips it) until it
 * expires; remove_by_regex counts only the caller's tenant; a read whose
 * transfer outlives its lease fails with LEASE_EXPIRED.
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
#include "case_util.h"

#define KIB	  1024u
#define MIB	  (1024u * 1024u)
#define HOT_GETS  100
#define BIG_VALUE (MIB + MIB / 2)

static uint8_t *buf; /* values written and read */
static int setup(void **state)
{
	if (case_setup(state) != 0)
		return -1;
	buf = malloc(4 * MIB);
	return buf ? 0 : -1;
}

static int teardown(void **state)
{
	free(buf);
	buf = NULL;
	return case_teardown(state);
}

/* put len bytes of key's pattern through c. */
static void put_pattern(struct lunar_client *c, const char *key, size_t len)
{
	put_seeded(c, key, buf, len, h_seed(key), NULL);
}

/* get key through c and check every byte against its pattern. */
static void check_value(struct lunar_client *c, const char *key, size_t len)
{
	check_seeded(c, key, buf, len, h_seed(key));
}

#define CALLS_BGRL "lunar_master_calls_total{method=\"BatchGetReplicaList\"}"
#define CALLS_GRL  "lunar_master_calls_total{method=\"GetReplicaList\"}"
#define CACHE_HITS "lunar_proxy_lease_cache_hits_total"
#define CACHE_MISS "lunar_proxy_lease_cache_misses_total"
#define CRC_FAILS  "lunar_proxy_checksum_failures_total"

static void test_leases_hot_key_costs_no_master_call(void **state)
{
	const char *sock = h_path("p.sock");
	struct h_proc *px;
	struct lunar_client *c;
	int64_t bgrl0, grl0, hits0, miss0, bgrl1, grl1, hits1, miss1;
	int port;

	(void)state;
	/* Given an embedded-master proxy (10 s leases) and a key read once,
	 * so that the proxy holds its lease and replica list */
	px = h_start_proxy("proxy", sock, H_EMBEDDED, NULL);
	H_ASSERT(px != NULL);
	port = http_port_of(px);
	c = h_client(sock);
	put_pattern(c, "hot/key", 64 * KIB);
	check_value(c, "hot/key", 64 * KIB);
	bgrl0 = metric(port, CALLS_BGRL);
	grl0 = metric(port, CALLS_GRL);
	hits0 = metric(port, CACHE_HITS);
	miss0 = metric(port, CACHE_MISS);
	H_ASSERT_MSG(bgrl0 + grl0 >= 1, "the first get asked the master nothing");

	/* When it is read HOT_GETS more times, well inside the lease */
	for (int i = 0; i < HOT_GETS; i++)
		check_value(c, "hot/key", 64 * KIB);

	/* Then the master saw no replica-list call, and the proxy counted
	 * every one of those reads as a lease-cache hit */
	bgrl1 = metric(port, CALLS_BGRL);
	grl1 = metric(port, CALLS_GRL);
	hits1 = metric(port, CACHE_HITS);
	miss1 = metric(port, CACHE_MISS);
	print_message("BatchGetReplicaList %lld -> %lld, GetReplicaList %lld -> %lld, "
		      "cache hits %lld -> %lld, misses %lld -> %lld\n",
		      (long long)bgrl0, (long long)bgrl1, (long long)grl0, (long long)grl1,
		      (long long)hits0, (long long)hits1, (long long)miss0, (long long)miss1);
	H_ASSERT_MSG(bgrl1 == bgrl0 && grl1 == grl0,
		     "%d cached gets cost %lld BatchGetReplicaList and %lld GetReplicaList calls",
		     HOT_GETS, (long long)(bgrl1 - bgrl0), (long long)(grl1 - grl0));
	H_ASSERT_MSG(hits1 - hits0 >= HOT_GETS && hits1 - hits0 <= HOT_GETS + 2,
		     "%s grew by %lld over %d cached gets", CACHE_HITS, (long long)(hits1 - hits0),
		     HOT_GETS);
	H_ASSERT_MSG(miss1 == miss0, "%s grew by %lld over %d cached gets", CACHE_MISS,
		     (long long)(miss1 - miss0), HOT_GETS);
	lunar_close(c);
}

#define WIDE_KEYS 400

/* Read WIDE_KEYS keys twice through a proxy keeping lease_keys replica
 * lists; the lease-cache misses of the second round. */
static int64_t second_round_misses(const char *lease_keys)
{
	char name[24], key[40];
	const char *sock;
	struct h_proc *px;
	struct lunar_client *c;
	int64_t miss0;
	int port;

	/* A name of its own: the test reads the proxy's port from its log */
	snprintf(name, sizeof(name), "wide-%s", lease_keys);
	snprintf(key, sizeof(key), "%s.sock", name);
	sock = h_path(key);
	px = h_start_proxy(name, sock, H_EMBEDDED, "--lease-cache-keys", lease_keys, NULL);
	H_ASSERT(px != NULL);
	port = http_port_of(px);
	c = h_client(sock);
	for (int i = 0; i < WIDE_KEYS; i++) {
		snprintf(key, sizeof(key), "wide/%d", i);
		put_pattern(c, key, KIB);
		check_value(c, key, KIB);
	}
	miss0 = metric(port, CACHE_MISS);
	for (int i = 0; i < WIDE_KEYS; i++) {
		snprintf(key, sizeof(key), "wide/%d", i);
		check_value(c, key, KIB);
	}
	miss0 = metric(port, CACHE_MISS) - miss0;
	lunar_close(c);
	H_ASSERT_EQ(h_stop(px), 0);
	print_message("--lease-cache-keys %s: %lld of %d second reads missed\n", lease_keys,
		      (long long)miss0, WIDE_KEYS);
	return miss0;
}

static void test_leases_cache_holds_as_many_keys_as_told(void **state)
{
	(void)state;
	/* Given WIDE_KEYS keys read once, When they are read again, Then a
	 * cache of one key a shard has lost most of them, and one with room
	 * for all serves every read */
	H_ASSERT(second_round_misses("64") > WIDE_KEYS / 2);
	H_ASSERT_EQ(second_round_misses("4096"), 0);
}

/* The first replica's segment and offset of key, from the master's
 * /admin/stat. */
static void replica_of(int port, const char *key, char *segment, size_t cap, int64_t *offset)
{
	char path[256];

	snprintf(path, sizeof(path), "/admin/stat?tenant=default&key=%s", key);
	fetch(port, path);
	H_ASSERT_MSG(hg_count(text, "\"segment\":\"") == 1, "%s: expected one replica: %s", key,
		     text);
	H_ASSERT_MSG(hg_json_str(text, "segment", 0, segment, cap) == 0, "stat %s: %s", key, text);
	*offset = hg_json_u64(text, "offset", 0);
	H_ASSERT_MSG(*offset >= 0, "stat %s: no offset: %s", key, text);
}

static void test_leases_stale_cached_list_is_caught_by_crc(void **state)
{
	char sock_a[PATH_MAX], sock_b[PATH_MAX], seg1[128], seg2[128];
	struct h_proc *master, *pa, *pb;
	struct lunar_client *ca, *cb;
	int mport, port_a, mhttp;
	int64_t off1, off2, got, crc0, crc1;

	(void)state;
	/* Given a master, a pure client node A and a node B whose 2 MiB
	 * segment holds one 1.5 MiB value at a time */
	mport = h_free_port();
	master = track(h_start_master("master", mport, NULL));
	H_ASSERT(master != NULL);
	mhttp = http_port_of(master);
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	/* No space reserved ahead for puts: a reservation taken on B's segment
	 * once K1 is gone could push K2 past K1's place. */
	pa = track(h_start_proxy("proxyA", sock_a, mport, "--segment-size", "0", "--reserve-size",
				 "0", NULL));
	H_ASSERT(pa != NULL);
	/* B's app removes a leased key by force: an admin call. */
	pb = track(h_start_proxy("proxyB", sock_b, mport, "--segment-size", "2MiB", "--admin-calls",
				 "--reserve-size", "0", NULL));
	H_ASSERT(pb != NULL);
	port_a = http_port_of(pa);
	ca = h_client(sock_a);
	cb = h_client(sock_b);

	/* and K1 put through A (so it lands on B) and read through A, which
	 * now caches K1's replica list under its lease */
	put_pattern(ca, "stale/K1", BIG_VALUE);
	replica_of(mhttp, "stale/K1", seg1, sizeof(seg1), &off1);
	check_value(ca, "stale/K1", BIG_VALUE);
	crc0 = metric(port_a, CRC_FAILS);

	/* When B force-removes K1 and puts K2 of the same size, which can only
	 * go where K1 was */
	H_ASSERT_EQ(lunar_remove(cb, "stale/K1", 1), 0);
	put_pattern(cb, "stale/K2", BIG_VALUE);
	replica_of(mhttp, "stale/K2", seg2, sizeof(seg2), &off2);
	H_ASSERT_MSG(!strcmp(seg1, seg2) && off1 == off2,
		     "precondition: K2 at %s+%lld, K1 was at %s+%lld", seg2, (long long)off2, seg1,
		     (long long)off1);

	/* Then A's get of K1 says OBJECT_NOT_FOUND: the cached list points at
	 * K2's bytes, whose CRC32C is not K1's */
	memset(buf, 0, BIG_VALUE);
	got = lunar_get_into(ca, "stale/K1", buf, 4 * MIB);
	if (got == (int64_t)BIG_VALUE)
		H_ASSERT_MSG(0, "get K1 through A returned %lld bytes (%s) from a stale list",
			     (long long)got,
			     h_verify(buf, BIG_VALUE, h_seed("stale/K2")) < 0	? "K2's bytes"
			     : h_verify(buf, BIG_VALUE, h_seed("stale/K1")) < 0 ? "K1's old bytes"
										: "a mix");
	H_ASSERT_EQ(got, LUNAR_ERR_OBJECT_NOT_FOUND);
	/* and A counted the checksum failure that sent it back to the master */
	crc1 = metric(port_a, CRC_FAILS);
	print_message("A: %s %lld -> %lld\n", CRC_FAILS, (long long)crc0, (long long)crc1);
	H_ASSERT_MSG(crc1 - crc0 >= 1, "%s on A grew by %lld after a stale cached read", CRC_FAILS,
		     (long long)(crc1 - crc0));
	/* and K2 reads intact through A */
	check_value(ca, "stale/K2", BIG_VALUE);
	lunar_close(ca);
	lunar_close(cb);
}

static void test_leases_remove_respects_lease_until_it_expires(void **state)
{
	const char *sock = h_path("p.sock");
	struct lunar_client *c;
	uint64_t t0;

	(void)state;
	/* Given an embedded-master proxy granting 1 s leases */
	H_ASSERT(h_start_proxy("proxy", sock, H_EMBEDDED, "--kv-lease-ttl", "1s", NULL) != NULL);
	c = h_client(sock);

	/* When K is read, Then an unforced remove is refused, a forced one
	 * works */
	put_pattern(c, "lease/K", 4 * KIB);
	check_value(c, "lease/K", 4 * KIB);
	H_ASSERT_EQ(lunar_remove(c, "lease/K", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	H_ASSERT_EQ(lunar_remove(c, "lease/K", 1), 0);
	H_ASSERT_EQ(lunar_exists(c, "lease/K"), 0);

	/* When a key was read 1.5 s ago (one lease and a half), Then an
	 * unforced remove works */
	put_pattern(c, "lease/K2", 4 * KIB);
	check_value(c, "lease/K2", 4 * KIB);
	t0 = h_now_ms();
	h_sleep_ms(1500);
	H_ASSERT_EQ(lunar_remove(c, "lease/K2", 0), 0);
	print_message("remove(K2, 0) worked %llu ms after the get\n",
		      (unsigned long long)(h_now_ms() - t0));

	/* When one of three keys is leased, Then remove_all(0) takes the two
	 * others and remove_all(1) the leased one */
	put_pattern(c, "all/1", 4 * KIB);
	put_pattern(c, "all/2", 4 * KIB);
	put_pattern(c, "all/3", 4 * KIB);
	check_value(c, "all/2", 4 * KIB);
	H_ASSERT_EQ(lunar_remove_all(c, 0), 2);
	H_ASSERT_EQ(lunar_exists(c, "all/1"), 0);
	H_ASSERT_EQ(lunar_exists(c, "all/3"), 0);
	H_ASSERT_EQ(lunar_exists(c, "all/2"), 1);
	H_ASSERT_EQ(lunar_remove_all(c, 1), 1);
	H_ASSERT_EQ(lunar_exists(c, "all/2"), 0);
	lunar_close(c);
}

/* A read as an engine makes it: the size, then the bytes (two calls, the
 * second a lease-cache hit). */
static void read_once(struct lunar_client *c, const char *key, size_t len)
{
	H_ASSERT_EQ(lunar_get_size(c, key), (int64_t)len);
	check_value(c, key, len);
}

/*
 * The lease as an app sees it ends one TTL after the last read, as
 * Mooncake's does: the proxy's heartbeat renews a key's lease only for
 * reads the lease it holds does not cover, not for every key read since
 * the last beat (which kept a key read once leased up to a heartbeat
 * longer: 0.6 s and more with 300 ms leases).
 */
static void test_leases_end_one_ttl_after_the_last_read(void **state)
{
	const char *sock = h_path("p.sock");
	struct lunar_client *c;
	uint64_t t0, last = 0;

	(void)state;
	/* Given an embedded-master proxy granting 300 ms leases (heartbeat 1 s) */
	H_ASSERT(h_start_proxy("proxy", sock, H_EMBEDDED, "--kv-lease-ttl", "300ms", NULL) != NULL);
	c = h_client(sock);

	/* When a key is read once and 375 ms pass, Then an unforced remove
	 * works; again with the heartbeat's beat in between */
	for (int round = 0; round < 3; round++) {
		put_pattern(c, "ttl/once", 4 * KIB);
		read_once(c, "ttl/once", 4 * KIB);
		t0 = h_now_ms();
		h_sleep_ms(375);
		H_ASSERT_MSG(lunar_remove(c, "ttl/once", 0) == 0,
			     "round %d: still leased %llu ms after one read", round,
			     (unsigned long long)(h_now_ms() - t0));
	}

	/* When a key is read every 50 ms for 1.2 s, Then it stays leased
	 * right after the last read, and not one TTL and a bit later */
	put_pattern(c, "ttl/hot", 4 * KIB);
	for (t0 = h_now_ms(); h_now_ms() - t0 < 1200; h_sleep_ms(50)) {
		read_once(c, "ttl/hot", 4 * KIB);
		last = h_now_ms();
	}
	H_ASSERT_EQ(lunar_remove(c, "ttl/hot", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	h_sleep_ms(375 - (unsigned)(h_now_ms() - last < 375 ? h_now_ms() - last : 375));
	H_ASSERT_EQ(lunar_remove(c, "ttl/hot", 0), 0);
	lunar_close(c);
}

static void test_leases_remove_by_regex_counts_per_tenant(void **state)
{
	const char *sock = h_path("p.sock");
	struct lunar_client *t1, *t2;

	(void)state;
	/* Given tenants t1 and t2 holding overlapping key names, one leased */
	H_ASSERT(h_start_proxy("proxy", sock, H_EMBEDDED, "--kv-lease-ttl", "30s", NULL) != NULL);
	t1 = tenant_client(sock, "t1");
	t2 = tenant_client(sock, "t2");
	put_pattern(t1, "rx/a1", 4 * KIB);
	put_pattern(t1, "rx/a2", 4 * KIB);
	put_pattern(t1, "rx/a3", 4 * KIB);
	put_pattern(t1, "rx/b1", 4 * KIB);
	put_pattern(t2, "rx/a1", 4 * KIB);
	put_pattern(t2, "rx/a9", 4 * KIB);
	check_value(t1, "rx/a3", 4 * KIB);

	/* When t1 removes ^rx/a unforced, Then only its two unleased matches
	 * go; t2's keys of the same names stay */
	H_ASSERT_EQ(lunar_remove_by_regex(t1, "^rx/a", 0), 2);
	H_ASSERT_EQ(lunar_exists(t1, "rx/a1"), 0);
	H_ASSERT_EQ(lunar_exists(t1, "rx/a2"), 0);
	H_ASSERT_EQ(lunar_exists(t1, "rx/a3"), 1);
	H_ASSERT_EQ(lunar_exists(t1, "rx/b1"), 1);
	H_ASSERT_EQ(lunar_exists(t2, "rx/a1"), 1);
	/* When forced, Then the leased match goes too */
	H_ASSERT_EQ(lunar_remove_by_regex(t1, "^rx/a", 1), 1);
	H_ASSERT_EQ(lunar_exists(t1, "rx/a3"), 0);
	/* When t2 removes the same pattern, Then it counts its own two */
	H_ASSERT_EQ(lunar_remove_by_regex(t2, "^rx/a", 1), 2);
	H_ASSERT_EQ(lunar_exists(t1, "rx/b1"), 1);
	H_ASSERT_EQ(lunar_remove_by_regex(t2, "^rx/", 1), 0);
	lunar_close(t1);
	lunar_close(t2);
}

/* A read whose transfer ends after its lease deadline fails with
 * LEASE_EXPIRED and its bytes are not reported as good (SPEC §3). With 1 ms
 * leases, copying 64 MiB takes longer than the lease; with the default 10 s
 * lease the same read succeeds. */
#define BIG (64u << 20)

static void read_big(const char *ttl, int64_t want)
{
	char sock[PATH_MAX];
	struct lunar_client *c;
	unsigned char *src, *dst;

	snprintf(sock, sizeof(sock), "%s", h_path(ttl));
	H_ASSERT(h_start_proxy(ttl, sock, H_EMBEDDED, "--segment-size", "256MiB", "--kv-lease-ttl",
			       ttl, NULL) != NULL);
	c = h_client(sock);
	H_ASSERT(c != NULL);
	/* Registered memory: no staging, the proxy copies straight in and out. */
	src = lunar_alloc(c, BIG);
	dst = lunar_alloc(c, BIG);
	H_ASSERT(src && dst);
	h_fill(src, BIG, h_seed("big"));
	memset(dst, 0, BIG);
	H_ASSERT_EQ(lunar_put(c, "big", src, BIG, NULL), 0);
	H_ASSERT_EQ(lunar_get_into(c, "big", dst, BIG), want);
	if (want == BIG)
		H_ASSERT_EQ(h_verify(dst, BIG, h_seed("big")), -1);
	lunar_free(c, src);
	lunar_free(c, dst);
	lunar_close(c);
}

static void test_leases_expired_read_is_not_good(void **state)
{
	(void)state;
	H_ASSERT_EQ(h_init(), 0);
	/* Given 1 ms leases, When a 64 MiB read takes longer, Then LEASE_EXPIRED */
	read_big("1ms", LUNAR_ERR_LEASE_EXPIRED);
	/* Given the default lease, Then the same read returns every byte */
	read_big("10s", BIG);
	h_cleanup();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_leases_hot_key_costs_no_master_call, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_leases_cache_holds_as_many_keys_as_told, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_leases_stale_cached_list_is_caught_by_crc, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_leases_remove_respects_lease_until_it_expires,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_leases_end_one_ttl_after_the_last_read, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_leases_remove_by_regex_counts_per_tenant, setup,
					    teardown),
	    cmocka_unit_test(test_leases_expired_read_is_not_good),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
