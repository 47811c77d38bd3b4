/*
 * test_cluster.c - a real cluster on loopback: one lunar-master and two
 * lunar-proxies A and B with 64 MiB segments each. Objects written through A
 * with two replicas read byte-exact through B, and still do after A is
 * SIGKILLed, which proves the replicas sit on two distinct segments. Batch
 * exists and prefix match answer index-aligned through B; batch gets read
 * their values together, remote and local. Beside an RDMA device
 * (tests/vm/), A writes B's replicas by RDMA.
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

#define NOBJ 200
#define KIB  1024u
#define MIB  (1024u * 1024u)
/* The client TTL the master runs with; A is dead for the master after it. */
#define CLIENT_TTL_MS 2000

static char sock_a[PATH_MAX], sock_b[PATH_MAX];
static struct h_proc *proxy_a;
static struct lunar_client *ca, *cb;
static uint8_t *rbuf;

/*
 * Sizes from 1 KiB to 4 MiB with odd lengths: 192 objects spread
 * log-uniformly over 1 KiB..256 KiB plus 8 large ones up to 4 MiB, about
 * 27 MiB in all, so two replicas of everything stay well under the eviction
 * watermark of two 64 MiB segments.
 */
static size_t obj_size(int i)
{
	if (i == 0)
		return KIB;
	if (i >= NOBJ - 8)
		return (size_t)(i - (NOBJ - 8) + 1) * (MIB / 2) - (i == NOBJ - 1 ? 0 : 3);
	/* 1 KiB * 2^(8 * i / 191), by integer steps of 1/8 octave. */
	{
		unsigned step = (unsigned)(i * 64 / 191); /* 0..64 eighth-octaves */
		double f = 1.0;

		for (unsigned s = 0; s < step % 8; s++)
			f *= 1.0905077326652577; /* 2^(1/8) */
		return (size_t)((double)(KIB << (step / 8)) * f) + (size_t)(i % 7) * 13;
	}
}

static void obj_key(int i, char *key, size_t len)
{
	snprintf(key, len, "cluster/obj-%03d", i);
}

static int setup(void **state)
{
	int port;

	(void)state;
	if (!h_cluster_master(&port, "--client-ttl", "2s", NULL))
		return -1;
	proxy_a = h_proxy_pair(port, sock_a, sock_b);
	if (!proxy_a)
		return -1;
	ca = h_client_try(sock_a, H_CLIENT_TIMEOUT_MS, NULL);
	cb = h_client_try(sock_b, H_CLIENT_TIMEOUT_MS, NULL);
	rbuf = malloc(4 * MIB + 4096);
	return ca && cb && rbuf ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	lunar_close(ca);
	lunar_close(cb);
	ca = cb = NULL;
	free(rbuf);
	rbuf = NULL;
	h_cleanup();
	return 0;
}

/* Reads object i through B and checks every byte. */
static void expect_object(int i, const char *when)
{
	size_t len = obj_size(i);
	char key[64];
	int64_t got, bad;

	obj_key(i, key, sizeof(key));
	memset(rbuf, 0, len);
	got = lunar_get_into(cb, key, rbuf, 4 * MIB + 4096);
	H_ASSERT_MSG(got == (int64_t)len, "%s: get %s = %lld (%s), expected %zu", when, key,
		     (long long)got, h_code(got), len);
	bad = h_verify(rbuf, len, h_seed(key));
	H_ASSERT_MSG(bad < 0, "%s: %s wrong at byte %lld of %zu", when, key, (long long)bad, len);
}

static void test_cluster_put_on_a_reads_exact_on_b(void **state)
{
	const struct lunar_put_cfg two = {.replica_num = 2};
	int64_t mark = h_rdma_mark(proxy_a);
	size_t total = 0;
	char key[64];
	uint8_t *wbuf = malloc(4 * MIB);

	(void)state;
	H_ASSERT(wbuf != NULL);
	H_ASSERT_EQ(obj_size(0), KIB);
	H_ASSERT_EQ(obj_size(NOBJ - 1), 4 * MIB);
	for (int i = 0; i < NOBJ; i++) {
		size_t len = obj_size(i);

		obj_key(i, key, sizeof(key));
		h_fill(wbuf, len, h_seed(key));
		H_ASSERT_MSG(lunar_put(ca, key, wbuf, len, &two) == 0, "put %s (%zu bytes) failed",
			     key, len);
		total += len;
	}
	print_message("put %d objects, %zu bytes, replica_num=2\n", NOBJ, total);
	h_rdma_check(proxy_a, mark, NOBJ); /* each put's replica on B */
	for (int i = 0; i < NOBJ; i++) {
		obj_key(i, key, sizeof(key));
		H_ASSERT_EQ(lunar_exists(cb, key), 1);
		H_ASSERT_EQ(lunar_get_size(cb, key), obj_size(i));
		expect_object(i, "both proxies up");
	}
	free(wbuf);
}

static void test_cluster_batch_exists_and_prefix_match(void **state)
{
	const char *keys[4] = {"cluster/obj-000", "cluster/obj-001", "cluster/missing",
			       "cluster/obj-003"};
	int results[4] = {99, 99, 99, 99};

	(void)state;
	H_ASSERT_EQ(lunar_batch_exists(cb, 4, keys, results), 0);
	H_ASSERT_EQ(results[0], 1);
	H_ASSERT_EQ(results[1], 1);
	H_ASSERT_EQ(results[2], 0);
	H_ASSERT_EQ(results[3], 1);
	H_ASSERT_EQ(lunar_prefix_match(cb, 4, keys), 2);
	H_ASSERT_EQ(lunar_prefix_match(cb, 2, keys), 2);
	H_ASSERT_EQ(lunar_prefix_match(cb, 1, &keys[2]), 0);
}

/*
 * A get of several keys: one replica of each, wherever the master put it,
 * so through one of A and B every read is remote, through the other local. Through the master's
 * lists first, then the lease cache; a missing key keeps its own code.
 */
static void test_cluster_batch_get_mixed_local_remote(void **state)
{
	enum { N = 6 };
	static const size_t lens[N] = {4096, MIB + 3, 0, 300 * KIB, 77, 2 * MIB + 4099};
	const struct lunar_put_cfg one = {.replica_num = 1};
	struct lunar_client *via[2] = {ca, cb};
	const char *keys[N];
	char names[N][32];
	struct iovec v[N];
	const struct iovec *vp[N];
	int cnt[N];
	int64_t res[N];

	(void)state;
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "cluster/bg-%d", i);
		keys[i] = names[i];
		v[i].iov_len = lens[i] ? lens[i] : 64;
		v[i].iov_base = malloc(v[i].iov_len);
		H_ASSERT(v[i].iov_base != NULL);
		vp[i] = &v[i];
		cnt[i] = 1;
		if (!lens[i])
			continue;
		h_fill(v[i].iov_base, lens[i], h_seed(keys[i]));
		H_ASSERT_EQ(lunar_put(ca, keys[i], v[i].iov_base, lens[i], &one), 0);
	}
	for (int pass = 0; pass < 4; pass++) {
		for (int i = 0; i < N; i++)
			memset(v[i].iov_base, 0, v[i].iov_len);
		H_ASSERT_EQ(lunar_batch_get_into(via[pass % 2], N, keys, vp, cnt, res), 0);
		for (int i = 0; i < N; i++) {
			if (!lens[i]) {
				H_ASSERT_EQ(res[i], LUNAR_ERR_OBJECT_NOT_FOUND);
				continue;
			}
			H_ASSERT_MSG(res[i] == (int64_t)lens[i], "pass %d: %s = %lld (%s)", pass,
				     keys[i], (long long)res[i], h_code(res[i]));
			H_ASSERT_EQ(h_verify(v[i].iov_base, lens[i], h_seed(keys[i])), -1);
		}
	}
	for (int i = 0; i < N; i++)
		free(v[i].iov_base);
}

static void test_cluster_replicas_survive_proxy_a_death(void **state)
{
	uint64_t killed;

	(void)state;
	h_kill(proxy_a);
	killed = h_now_ms();
	/* At once: B must serve from its own replica, not the dead one. */
	for (int i = 0; i < NOBJ; i++)
		expect_object(i, "A just killed");
	/* After the master has declared A dead and dropped its replicas. */
	while (h_now_ms() < killed + CLIENT_TTL_MS + 1500)
		h_sleep_ms(50);
	for (int i = 0; i < NOBJ; i++) {
		char key[64];

		obj_key(i, key, sizeof(key));
		H_ASSERT_EQ(lunar_exists(cb, key), 1);
		expect_object(i, "A dead past the client TTL");
	}
}

LUNAR_TEST_MAIN(setup, teardown, test_cluster_put_on_a_reads_exact_on_b,
		test_cluster_batch_exists_and_prefix_match,
		test_cluster_batch_get_mixed_local_remote,
		test_cluster_replicas_survive_proxy_a_death)
