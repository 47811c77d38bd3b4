/*
 * test_etcd.c - the master's etcd client (master/etcd.c) against a real
 * etcd on loopback: leases granted, renewed and revoked; the leader key
 * created only when absent, read back with its create revision and lease,
 * and gone with its lease; a dead endpoint in the list is skipped; a call
 * with every endpoint dead fails in bounded time; a cancelled call stops.
 * Skips (77) without etcd.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "etcd_util.h"
#include "harness.h"
#include "etcd/etcd.h"
#include "etcd/leader.h"

static struct e_cluster ec;

static int group_setup(void **state)
{
	(void)state;
	if (h_init() || e_start(&ec, 1))
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	h_cleanup();
	return 0;
}

static struct etcd_client *client(const char *urls)
{
	struct etcd_client *e = NULL;

	H_ASSERT_EQ(etcd_alloc(urls, 1000, NULL, &e), 0);
	return e;
}

static void test_etcd_lease_grant_keepalive_revoke(void **state)
{
	struct etcd_client *e = client(ec.urls);
	int64_t id = 0, ttl = 0;

	(void)state;
	H_ASSERT_EQ(etcd_lease_grant(e, 5, &id, &ttl), 0);
	H_ASSERT(id != 0 && ttl >= 5);
	H_ASSERT_EQ(etcd_lease_keepalive(e, id, &ttl), 0);
	H_ASSERT(ttl >= 5);
	H_ASSERT_EQ(etcd_lease_revoke(e, id), 0);
	H_ASSERT_EQ(etcd_lease_keepalive(e, id, &ttl), 0);
	H_ASSERT_EQ(ttl, 0); /* etcd forgot it */
	H_ASSERT_EQ(etcd_lease_revoke(e, id), -ENOENT);
	etcd_free(e);
}

static void test_etcd_create_only_when_absent(void **state)
{
	struct etcd_client *e = client(ec.urls);
	struct etcd_kv kv;
	int64_t id, ttl, rev = 0, rev2 = -1;

	(void)state;
	H_ASSERT_EQ(etcd_get(e, "/lunar/t1/leader", &kv), -ENOENT);
	H_ASSERT_EQ(etcd_lease_grant(e, 5, &id, &ttl), 0);
	H_ASSERT_EQ(etcd_create(e, "/lunar/t1/leader", "tcp://127.0.0.1:1", id, &rev), 0);
	H_ASSERT(rev > 0);
	H_ASSERT_EQ(etcd_create(e, "/lunar/t1/leader", "tcp://127.0.0.1:2", id, &rev2), -EEXIST);
	H_ASSERT_EQ(rev2, -1);
	H_ASSERT_EQ(etcd_get(e, "/lunar/t1/leader", &kv), 0);
	H_ASSERT(!strcmp(kv.value, "tcp://127.0.0.1:1"));
	H_ASSERT_EQ(kv.create_rev, rev);
	H_ASSERT_EQ(kv.lease, id);
	/* The key goes with its lease, and can be made again with a new view */
	H_ASSERT_EQ(etcd_lease_revoke(e, id), 0);
	H_ASSERT_EQ(etcd_get(e, "/lunar/t1/leader", &kv), -ENOENT);
	H_ASSERT_EQ(etcd_create(e, "/lunar/t1/leader", "tcp://127.0.0.1:2", 0, &rev2), 0);
	H_ASSERT(rev2 > rev);
	etcd_free(e);
}

static void test_etcd_put_list_and_members(void **state)
{
	struct etcd_client *e = client(ec.urls);
	struct etcd_leader ms[4];
	struct etcd_kv kv[4];
	char key[256], val[256];
	int64_t id, ttl;

	(void)state;
	H_ASSERT_EQ(etcd_list(e, "/lunar/t2/members/", kv, 4), 0);
	H_ASSERT_EQ(etcd_lease_grant(e, 5, &id, &ttl), 0);
	for (int i = 1; i <= 3; i++) {
		char rpc[64];

		snprintf(rpc, sizeof(rpc), "tcp://127.0.0.1:%d", i);
		H_ASSERT_EQ(etcd_member_key("t2", rpc, key, sizeof(key)), 0);
		H_ASSERT(etcd_leader_encode(rpc, "http://127.0.0.1:9", val, sizeof(val)) > 0);
		H_ASSERT_EQ(etcd_put(e, key, val, i == 3 ? 0 : id), 0);
	}
	/* Put replaces; a key outside the prefix is not listed */
	H_ASSERT_EQ(etcd_put(e, key, "tcp://127.0.0.1:3", 0), 0);
	H_ASSERT_EQ(etcd_put(e, "/lunar/t2/members0", "x", 0), 0);
	H_ASSERT_EQ(etcd_list(e, "/lunar/t2/members/", kv, 4), 3);
	H_ASSERT_EQ(etcd_list(e, "/lunar/t2/members/", kv, 2), 2);
	H_ASSERT_EQ(etcd_members_read(e, "t2", ms, 4), 3);
	H_ASSERT(!strcmp(ms[0].rpc, "tcp://127.0.0.1:1") &&
		 !strcmp(ms[0].http, "http://127.0.0.1:9"));
	H_ASSERT(!strcmp(ms[2].rpc, "tcp://127.0.0.1:3") && !ms[2].http[0]);
	/* Members go with their lease; a put on an unknown lease fails */
	H_ASSERT_EQ(etcd_lease_revoke(e, id), 0);
	H_ASSERT_EQ(etcd_members_read(e, "t2", ms, 4), 1);
	H_ASSERT_EQ(etcd_put(e, key, val, id), -EIO);
	H_ASSERT_EQ(etcd_list(e, "", kv, 4), -EINVAL);
	H_ASSERT_EQ(etcd_member_key("t2", "tcp://a\"b", key, sizeof(key)), -EINVAL);
	etcd_free(e);
}

static void test_etcd_dead_endpoint_is_skipped(void **state)
{
	char urls[512];
	struct etcd_client *e;
	struct etcd_kv kv;

	(void)state;
	snprintf(urls, sizeof(urls), "http://127.0.0.1:%d,%s", h_free_port(), ec.urls);
	e = client(urls);
	H_ASSERT_EQ(etcd_get(e, "/lunar/none", &kv), -ENOENT);
	H_ASSERT(!strcmp(etcd_endpoint(e), ec.m[0].url));
	etcd_free(e);
}

static void test_etcd_all_dead_fails_in_bounded_time(void **state)
{
	char urls[512];
	struct etcd_client *e;
	int64_t id, ttl;
	uint64_t t0;

	(void)state;
	snprintf(urls, sizeof(urls), "http://127.0.0.1:%d,http://127.0.0.1:%d", h_free_port(),
		 h_free_port());
	e = client(urls);
	t0 = h_now_ms();
	H_ASSERT_EQ(etcd_lease_grant(e, 5, &id, &ttl), -EIO);
	H_ASSERT(h_now_ms() - t0 < 3000);
	etcd_free(e);
}

static void test_etcd_cancel_and_bad_lists(void **state)
{
	struct etcd_client *e = NULL;
	struct etcd_kv kv;
	int cancel = 1;

	(void)state;
	H_ASSERT_EQ(etcd_alloc(ec.urls, 1000, &cancel, &e), 0);
	H_ASSERT_EQ(etcd_get(e, "/lunar/none", &kv), -ECANCELED);
	etcd_free(e);
	H_ASSERT_EQ(etcd_alloc("", 1000, NULL, &e), -EINVAL);
	H_ASSERT_EQ(etcd_alloc("127.0.0.1:2379", 1000, NULL, &e), -EINVAL);
	H_ASSERT_EQ(etcd_alloc("http://a:1,,http://b:2", 1000, NULL, &e), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_etcd_lease_grant_keepalive_revoke),
	    cmocka_unit_test(test_etcd_create_only_when_absent),
	    cmocka_unit_test(test_etcd_put_list_and_members),
	    cmocka_unit_test(test_etcd_dead_endpoint_is_skipped),
	    cmocka_unit_test(test_etcd_all_dead_fails_in_bounded_time),
	    cmocka_unit_test(test_etcd_cancel_and_bad_lists),
	};

	e_skip_without_etcd();
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
