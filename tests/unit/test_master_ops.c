/*
 * test_master_ops.c - the master's calls for checksums, upsert,
 * remove by regex, batch remove, tenant quotas, graceful unmount, local_first
 * placement, admin queries, metrics and readiness.
 */
#include "test_master_util.h"

#include "clock.h"
#include "master/mst_obj.h"
#include "tests/cmocka_main.h"

static int put_end_crc(struct mst_master *m, uint32_t method, uint64_t client, const char *key,
		       uint32_t crc)
{
	Lunar__PutEndRequest rq = LUNAR__PUT_END_REQUEST__INIT;

	rq.client_id = client;
	rq.key = (char *)key;
	rq.crc32c = crc;
	return call_code(m, method, &rq);
}

/* UpsertStart; the reply (caller frees). */
static Lunar__PutStartReply *upsert_start(struct mst_master *m, uint64_t client, const char *key,
					  uint64_t size)
{
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;

	rq.client_id = client;
	rq.key = (char *)key;
	rq.size = size;
	return (Lunar__PutStartReply *)call(m, LUNAR__METHOD__UPSERT_START, &rq);
}

static int upsert_start_code(struct mst_master *m, uint64_t client, const char *key, uint64_t size)
{
	Lunar__PutStartReply *r = upsert_start(m, client, key, size);
	int code = r->status->code;

	protobuf_c_message_free_unpacked(&r->base, NULL);
	return code;
}

static int put_tenant(struct mst_master *m, const char *tenant, const char *key, uint64_t size)
{
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;
	Lunar__PutEndRequest end = LUNAR__PUT_END_REQUEST__INIT;
	int code;

	rq.client_id = end.client_id = CLIENT_A;
	rq.tenant = end.tenant = (char *)tenant;
	rq.key = end.key = (char *)key;
	rq.size = size;
	code = call_code(m, LUNAR__METHOD__PUT_START, &rq);
	return code ? code : call_code(m, LUNAR__METHOD__PUT_END, &end);
}

static int64_t remove_regex(struct mst_master *m, const char *tenant, const char *re, int force)
{
	Lunar__RemoveByRegexRequest rq = LUNAR__REMOVE_BY_REGEX_REQUEST__INIT;
	Lunar__RemoveAllReply *r;
	int64_t n;

	rq.tenant = (char *)tenant;
	rq.pattern = (char *)re;
	rq.force = force;
	r = (Lunar__RemoveAllReply *)call(m, LUNAR__METHOD__REMOVE_BY_REGEX, &rq);
	n = r->status->code ? r->status->code : r->count;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return n;
}

static uint64_t used_bytes(struct mst_master *m)
{
	struct mst_stats st;

	mst_master_stats(m, &st);
	return st.used_bytes;
}

static void test_master_crc_recorded(void **state)
{
	/* Given: k committed with a CRC, b0/b1 by batch */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__BatchPutEndRequest be = LUNAR__BATCH_PUT_END_REQUEST__INIT;
	Lunar__BatchKeysRequest bk = LUNAR__BATCH_KEYS_REQUEST__INIT;
	Lunar__StatKeyRequest sk = LUNAR__STAT_KEY_REQUEST__INIT;
	Lunar__BatchGetReplicaListReply *gr;
	Lunar__GetReplicaListReply *g;
	Lunar__StatKeyReply *st;
	char *keys[2] = {"b0", "b1"};
	uint32_t crcs[2] = {0x11111111, 0x22222222};

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put_start(m, CLIENT_A, "k", 100, 1), 0);
	assert_int_equal(put_end_crc(m, LUNAR__METHOD__PUT_END, CLIENT_A, "k", 0xdeadbeef), 0);
	assert_int_equal(put_start(m, CLIENT_A, "b0", 100, 1), 0);
	assert_int_equal(put_start(m, CLIENT_A, "b1", 100, 1), 0);
	be.client_id = CLIENT_A;
	be.keys = keys;
	be.n_keys = 2;
	be.crc32c = crcs;
	be.n_crc32c = 1; /* Then: a CRC list not matching the keys is refused whole */
	assert_int_equal(call_code(m, LUNAR__METHOD__BATCH_PUT_END, &be), LUNAR_ERR_INVALID_PARAMS);
	be.n_crc32c = 2;
	assert_int_equal(call_code(m, LUNAR__METHOD__BATCH_PUT_END, &be), 0);
	/* Then: get, batch get and stat return the CRCs */
	g = get(m, "k");
	assert_int_equal(g->crc32c, 0xdeadbeef);
	protobuf_c_message_free_unpacked(&g->base, NULL);
	bk.keys = keys;
	bk.n_keys = 2;
	gr = (Lunar__BatchGetReplicaListReply *)call(m, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, &bk);
	assert_int_equal(gr->results[0]->crc32c, 0x11111111);
	assert_int_equal(gr->results[1]->crc32c, 0x22222222);
	protobuf_c_message_free_unpacked(&gr->base, NULL);
	sk.key = "k";
	st = (Lunar__StatKeyReply *)call(m, LUNAR__METHOD__STAT_KEY, &sk);
	assert_int_equal(st->status->code, 0);
	assert_int_equal(st->crc32c, 0xdeadbeef);
	assert_int_equal(st->state, LUNAR__REPLICA_STATE__COMPLETE);
	assert_int_equal(st->writer, CLIENT_A);
	assert_int_equal(st->n_replicas, 1);
	protobuf_c_message_free_unpacked(&st->base, NULL);
	mst_master_destroy(m);
}

static void test_master_upsert_absent_is_put(void **state)
{
	/* Given: no key; When: upserted; Then: it is a plain put */
	struct mst_master *m = master_new(NULL, NULL);

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(upsert_start_code(m, CLIENT_A, "k", 100), 0);
	assert_int_equal(exist(m, NULL, "k"), 0);
	assert_int_equal(put_end_crc(m, LUNAR__METHOD__UPSERT_END, CLIENT_B, "k", 1),
			 LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(put_end_crc(m, LUNAR__METHOD__UPSERT_END, CLIENT_A, "k", 1), 0);
	assert_int_equal(exist(m, NULL, "k"), 1);
	/* and upserting a key under a put refuses: not ready */
	assert_int_equal(put_start(m, CLIENT_A, "p", 100, 1), 0);
	assert_int_equal(upsert_start_code(m, CLIENT_B, "p", 100), LUNAR_ERR_REPLICA_IS_NOT_READY);
	mst_master_destroy(m);
}

static void test_master_upsert_old_or_new(void **state)
{
	/* Given: k (1000 bytes) committed and just read (lease 300ms) */
	static const char *const flags[][2] = {{"kv-lease-ttl", "300ms"}};
	struct mst_master *m = master_with(flags, 1);
	Lunar__PutStartReply *u;
	Lunar__GetReplicaListReply *g;
	uint64_t old_off, new_off;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k", 1000, 1), 0);
	g = get(m, "k");
	old_off = g->replicas[0]->offset;
	protobuf_c_message_free_unpacked(&g->base, NULL);
	/* When: B upserts 2000 bytes */
	u = upsert_start(m, CLIENT_B, "k", 2000);
	assert_int_equal(u->status->code, 0);
	assert_int_equal(u->n_replicas, 1);
	new_off = u->replicas[0]->offset;
	protobuf_c_message_free_unpacked(&u->base, NULL);
	/* Then: the new range is new space; readers still see the old value */
	assert_true(new_off != old_off);
	g = get(m, "k");
	assert_int_equal(g->size, 1000);
	assert_int_equal(g->replicas[0]->offset, old_off);
	protobuf_c_message_free_unpacked(&g->base, NULL);
	/* and nobody else may upsert, commit it or remove it meanwhile */
	assert_int_equal(upsert_start_code(m, CLIENT_A, "k", 10), LUNAR_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(put_end_crc(m, LUNAR__METHOD__UPSERT_END, CLIENT_A, "k", 7),
			 LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(remove_key(m, "k", 1), LUNAR_ERR_REPLICA_IS_NOT_READY);
	/* When: B commits; Then: readers see the new value at once */
	assert_int_equal(put_end_crc(m, LUNAR__METHOD__UPSERT_END, CLIENT_B, "k", 7), 0);
	g = get(m, "k");
	assert_int_equal(g->size, 2000);
	assert_int_equal(g->crc32c, 7);
	assert_int_equal(g->replicas[0]->offset, new_off);
	protobuf_c_message_free_unpacked(&g->base, NULL);
	/* and the old range is given back only after the lease */
	assert_int_equal(used_bytes(m), 1024 + 2048);
	usleep(600 * 1000);
	assert_int_equal(used_bytes(m), 2048);
	mst_master_destroy(m);
}

static void test_master_upsert_revoke(void **state)
{
	/* Given: k committed and an upsert of it in flight */
	struct mst_master *m = master_new(NULL, NULL);

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k", 1000, 1), 0);
	assert_int_equal(upsert_start_code(m, CLIENT_B, "k", 3000), 0);
	/* When: only its writer may revoke it */
	assert_int_equal(put_finish(m, CLIENT_A, "k", 0), LUNAR_ERR_INVALID_PARAMS);
	{
		Lunar__PutRevokeRequest rv = LUNAR__PUT_REVOKE_REQUEST__INIT;

		rv.key = "k";
		rv.client_id = CLIENT_A;
		assert_int_equal(call_code(m, LUNAR__METHOD__UPSERT_REVOKE, &rv),
				 LUNAR_ERR_ILLEGAL_CLIENT);
		rv.client_id = CLIENT_B;
		assert_int_equal(call_code(m, LUNAR__METHOD__UPSERT_REVOKE, &rv), 0);
	}
	/* Then: the new space is back at once and the old value stays */
	assert_int_equal(used_bytes(m), 1024);
	assert_int_equal(get_code(m, "k"), 0);
	mst_master_destroy(m);
}

/* BatchPutRevoke or BatchUpsertRevoke of one key by client; its code. */
static int revoke_one(struct mst_master *m, uint32_t method, uint64_t client, const char *key,
		      int late)
{
	Lunar__BatchKeysRequest rq = LUNAR__BATCH_KEYS_REQUEST__INIT;
	char *keys[1] = {(char *)key};
	Lunar__BatchCodesReply *r;
	int code;

	rq.client_id = client;
	rq.keys = keys;
	rq.n_keys = 1;
	rq.late = late;
	r = (Lunar__BatchCodesReply *)call(m, method, &rq);
	code = r->status->code ? r->status->code : r->codes[0];
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return code;
}

static void test_master_late_revoke_holds_space(void **state)
{
	/* Given: a release timeout of 300ms, k committed (1 KiB), an upsert
	 * of k (300 KiB) and a put of p (400 KiB), each by a writer that gave
	 * up on a transfer whose bytes may still land */
	static const char *flags[][2] = {{"put-start-release-timeout", "300ms"}};
	struct mst_master *m = master_with(flags, 1);

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k", 1000, 1), 0);
	assert_int_equal(upsert_start_code(m, CLIENT_B, "k", 300 * 1024), 0);
	assert_int_equal(put_start(m, CLIENT_B, "p", 400 * 1024, 1), 0);
	/* When: both are revoked late */
	assert_int_equal(revoke_one(m, LUNAR__METHOD__BATCH_UPSERT_REVOKE, CLIENT_B, "k", 1), 0);
	assert_int_equal(revoke_one(m, LUNAR__METHOD__BATCH_PUT_REVOKE, CLIENT_B, "p", 1), 0);
	/* Then: the keys are as before the writes, but no new value gets
	 * their ranges until the release timeout */
	assert_int_equal(get_code(m, "k"), 0);
	assert_int_equal(get_code(m, "p"), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(used_bytes(m), 1024 + 700 * 1024);
	assert_int_equal(put_start(m, CLIENT_A, "q", 600 * 1024, 1), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	usleep(600 * 1000);
	assert_int_equal(used_bytes(m), 1024);
	assert_int_equal(put_start(m, CLIENT_A, "q", 600 * 1024, 1), 0);
	/* and a plain revoke still gives the space back at once */
	assert_int_equal(revoke_one(m, LUNAR__METHOD__BATCH_PUT_REVOKE, CLIENT_A, "q", 0), 0);
	assert_int_equal(used_bytes(m), 1024);
	mst_master_destroy(m);
}

static void test_master_remove_by_regex(void **state)
{
	/* Given: a1, a2 (leased), b1 in default; a3 in t2 */
	struct mst_master *m = master_new(NULL, NULL);

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "a1", 10, 1), 0);
	assert_int_equal(put(m, CLIENT_A, "a2", 10, 1), 0);
	assert_int_equal(put(m, CLIENT_A, "b1", 10, 1), 0);
	assert_int_equal(put_tenant(m, "t2", "a3", 10), 0);
	assert_int_equal(exist(m, NULL, "a2"), 1);
	/* When/Then: ^a unforced takes a1 only, forced takes a2 too */
	assert_int_equal(remove_regex(m, NULL, "^a[0-9]+$", 0), 1);
	assert_int_equal(remove_regex(m, "default", "^a", 1), 1);
	assert_int_equal(exist(m, NULL, "b1"), 1);
	assert_int_equal(exist(m, "t2", "a3"), 1);
	/* and a bad pattern is refused, as is a back-reference (matching one
	 * can take exponential time under a shard lock), but not an escaped
	 * backslash before a digit */
	assert_int_equal(remove_regex(m, NULL, "(", 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "", 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "(.*)*(.*)*\\1\\2!", 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "^b\\\\1", 1), 0);
	assert_int_equal(exist(m, NULL, "b1"), 1);
	mst_master_destroy(m);
}

static void test_master_remove_by_regex_bounds_its_cost(void **state)
{
	/* Given: one long key, on which glibc took 15 s to match the first
	 * pattern below (its automaton has ~4000 nodes) */
	struct mst_master *m = master_new(NULL, NULL);
	char key[4001];

	(void)state;
	memset(key, 'a', sizeof(key) - 1);
	key[sizeof(key) - 1] = 0;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, key, 10, 1), 0);
	/* When/Then: nested intervals whose product is large are refused, also
	 * behind an unmatched ')' or inside deep groups */
	assert_int_equal(remove_regex(m, NULL, "(a{0,64}){0,64}x", 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "(((a|b){0,20}){0,20}){0,20}x", 1),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, ")(a{0,64}){0,64}x", 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(
	    remove_regex(m, NULL,
			 "((((((((((((((((((((((((((((((((((a))))))))))))))))))))))))))))))))))",
			 1),
	    LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "a{0,300}x", 1), LUNAR_ERR_INVALID_PARAMS);
	/* glibc reads "{,n}" as "{0,n}" (it took 5.9 s on a 1000-byte key) */
	assert_int_equal(remove_regex(m, NULL, "(a{,64}){,64}x", 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "((a{,40}){,40}){,40}x", 1),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "a{,300}x", 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "a{99999999999999999999999}x", 1),
			 LUNAR_ERR_INVALID_PARAMS);
	/* and what keys are usually matched with stays allowed */
	assert_int_equal(remove_regex(m, NULL, "^req-[0-9a-f]{32}/layer[0-9]{1,3}$", 1), 0);
	assert_int_equal(remove_regex(m, NULL, "^[]a]{1,8}(x|y)*[[:digit:]]+$", 1), 0);
	assert_int_equal(remove_regex(m, NULL, "^a{,8}b{,}c$", 1), 0);
	assert_int_equal(remove_regex(m, NULL, "^a{4000}$", 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_regex(m, NULL, "^a+$", 1), 1);
	mst_master_destroy(m);
}

struct slow_remove {
	struct mst_master *m;
	uint64_t ms; /* how long the remove took */
};

static void *slow_remove_main(void *arg)
{
	struct slow_remove *r = arg;
	uint64_t t0 = lc_now_ms();

	/* Allowed, yet milliseconds per 2000-byte key of 'a's; matches none. */
	assert_int_equal(remove_regex(r->m, NULL, "(a{0,14}){0,14}z", 1), 0);
	r->ms = lc_now_ms() - t0;
	return NULL;
}

static size_t shard_of(const char *key)
{
	struct mst_okey k;

	assert_int_equal(mst_okey_make(&k, "default", key), 0);
	return k.hash % MST_SHARDS;
}

static void test_master_remove_by_regex_matches_outside_the_lock(void **state)
{
	/* Given: 200 keys of 2000 bytes in the shard of the key "victim" */
	struct mst_master *m = master_new(NULL, NULL);
	struct slow_remove r = {.m = m};
	size_t shard = shard_of("victim");
	char key[2016];
	uint64_t t0, ms;
	pthread_t th;

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "victim", 10, 1), 0);
	memset(key, 'a', 2000);
	for (unsigned i = 0, found = 0; found < 200; i++) {
		snprintf(key + 2000, sizeof(key) - 2000, "-%u", i);
		if (shard_of(key) == shard && ++found)
			assert_int_equal(put(m, CLIENT_A, key, 10, 1), 0);
	}
	/* When: a remove by a slow pattern runs */
	assert_int_equal(pthread_create(&th, NULL, slow_remove_main, &r), 0);
	usleep(50 * 1000);
	t0 = lc_now_ms();
	assert_int_equal(exist(m, NULL, "victim"), 1);
	ms = lc_now_ms() - t0;
	assert_int_equal(pthread_join(th, NULL), 0);
	/* Then: a call on that shard did not wait for the matching */
	printf("remove by regex %llu ms, a call on its shard meanwhile %llu ms\n",
	       (unsigned long long)r.ms, (unsigned long long)ms);
	assert_true(ms * 4 < r.ms);
	mst_master_destroy(m);
}

static void test_master_batch_remove(void **state)
{
	/* Given: x, leased y */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__BatchRemoveRequest rq = LUNAR__BATCH_REMOVE_REQUEST__INIT;
	Lunar__BatchCodesReply *r;
	char *keys[4] = {"x", "nope", "y", ""};

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "x", 10, 1), 0);
	assert_int_equal(put(m, CLIENT_A, "y", 10, 1), 0);
	assert_int_equal(exist(m, NULL, "y"), 1);
	rq.keys = keys;
	rq.n_keys = 4;
	/* When/Then: per-key codes, in order */
	r = (Lunar__BatchCodesReply *)call(m, LUNAR__METHOD__BATCH_REMOVE, &rq);
	assert_int_equal(r->n_codes, 4);
	assert_int_equal(r->codes[0], 0);
	assert_int_equal(r->codes[1], LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(r->codes[2], LUNAR_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(r->codes[3], LUNAR_ERR_INVALID_KEY);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	mst_master_destroy(m);
}

static void test_master_tenant_quota(void **state)
{
	/* Given: t1 may store 10 KiB, any other named tenant 2 KiB */
	static const char *const flags[][2] = {{"tenant-quota", "t1=10KiB"},
					       {"default-tenant-quota", "2KiB"}};
	struct mst_master *m = master_with(flags, 2);

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	/* When/Then: puts beyond the quota are refused, in flight ones count */
	assert_int_equal(put_tenant(m, "t1", "a", 8 * 1024), 0);
	assert_int_equal(put_tenant(m, "t1", "b", 4 * 1024), LUNAR_ERR_TENANT_QUOTA_EXCEEDED);
	assert_int_equal(put_tenant(m, "t3", "a", 3 * 1024), LUNAR_ERR_TENANT_QUOTA_EXCEEDED);
	assert_int_equal(put_tenant(m, "t3", "a", 2 * 1024), 0);
	/* and removal gives the quota back */
	assert_int_equal(remove_all(m, "t1", 1), 1);
	assert_int_equal(put_tenant(m, "t1", "b", 4 * 1024), 0);
	mst_master_destroy(m);
}

static void test_master_config_quota_flags(void **state)
{
	struct mst_config cfg;

	mst_config_defaults(&cfg);
	/* Then: quotas accumulate, repeat names resize, bad ones are refused */
	assert_int_equal(mst_config_set(&cfg, "tenant-quota", "a=1KiB"), 0);
	assert_int_equal(mst_config_set(&cfg, "tenant-quota", "b=2KiB"), 0);
	assert_int_equal(mst_config_set(&cfg, "tenant-quota", "a=3KiB"), 0);
	assert_int_equal(cfg.n_tenant_quotas, 2);
	assert_int_equal(cfg.tenant_quotas[0].bytes, 3 * 1024);
	assert_int_equal(mst_config_set(&cfg, "tenant-quota", "a"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "tenant-quota", "bad name=1"),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "tenant-quota", "=1"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "default-tenant-quota", "1GiB"), 0);
	assert_int_equal(cfg.default_tenant_quota, 1ull << 30);
}

static Lunar__ListSegmentsReply *list_segments(struct mst_master *m)
{
	Lunar__ListSegmentsRequest rq = LUNAR__LIST_SEGMENTS_REQUEST__INIT;

	return (Lunar__ListSegmentsReply *)call(m, LUNAR__METHOD__LIST_SEGMENTS, &rq);
}

static void test_master_graceful_unmount(void **state)
{
	/* Given: k on seg-a; seg-b too */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__UnmountSegmentRequest rq = LUNAR__UNMOUNT_SEGMENT_REQUEST__INIT;
	Lunar__ListSegmentsReply *ls;
	Lunar__PutStartReply *r;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k", 100, 1), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", MIB), 0);
	/* When: seg-a is unmounted with 300ms grace */
	rq.client_id = CLIENT_A;
	rq.name = "seg-a";
	rq.grace_ms = 300;
	assert_int_equal(call_code(m, LUNAR__METHOD__UNMOUNT_SEGMENT, &rq), 0);
	/* Then: it is draining, still readable, and takes no new data */
	ls = list_segments(m);
	assert_int_equal(ls->n_segments, 2);
	for (size_t i = 0; i < 2; i++)
		assert_int_equal(ls->segments[i]->draining,
				 !strcmp(ls->segments[i]->name, "seg-a"));
	protobuf_c_message_free_unpacked(&ls->base, NULL);
	assert_int_equal(get_code(m, "k"), 0);
	r = put_start_pref(m, CLIENT_A, "n", 100, 2, "seg-a");
	assert_int_equal(r->n_replicas, 1);
	assert_string_equal(r->replicas[0]->segment, "seg-b");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	/* and after the grace it is gone with its replicas */
	usleep(600 * 1000);
	assert_int_equal(get_code(m, "k"), LUNAR_ERR_OBJECT_NOT_FOUND);
	ls = list_segments(m);
	assert_int_equal(ls->n_segments, 1);
	protobuf_c_message_free_unpacked(&ls->base, NULL);
	mst_master_destroy(m);
}

static void test_master_local_first(void **state)
{
	/* Given: local_first; seg-a by A, seg-b by B */
	static const char *const flags[][2] = {{"allocation-strategy", "local_first"}};
	struct mst_master *m = master_with(flags, 1);

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", MIB), 0);
	/* When/Then: each proxy's puts land on its own segment */
	for (int i = 0; i < 8; i++) {
		char key[16];
		uint64_t c = i % 2 ? CLIENT_B : CLIENT_A;
		Lunar__PutStartReply *r;

		snprintf(key, sizeof(key), "k%d", i);
		r = put_start_pref(m, c, key, 100, 1, NULL);
		assert_string_equal(r->replicas[0]->segment, i % 2 ? "seg-b" : "seg-a");
		protobuf_c_message_free_unpacked(&r->base, NULL);
	}
	mst_master_destroy(m);
}

static void test_master_list_keys(void **state)
{
	/* Given: 5 keys in default, 1 in t2, one unfinished */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__ListKeysRequest rq = LUNAR__LIST_KEYS_REQUEST__INIT;
	Lunar__ListKeysReply *r;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	for (int i = 0; i < 5; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(put(m, CLIENT_A, key, 10, 1), 0);
	}
	assert_int_equal(put_tenant(m, "t2", "k9", 10), 0);
	assert_int_equal(put_start(m, CLIENT_A, "p", 10, 1), 0);
	/* When/Then: every tenant, a pattern, a tenant, a limit */
	r = (Lunar__ListKeysReply *)call(m, LUNAR__METHOD__LIST_KEYS, &rq);
	assert_int_equal(r->n_keys, 7);
	assert_false(r->truncated);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	rq.pattern = "^k[0-9]$";
	rq.tenant = "t2";
	r = (Lunar__ListKeysReply *)call(m, LUNAR__METHOD__LIST_KEYS, &rq);
	assert_int_equal(r->n_keys, 1);
	assert_string_equal(r->keys[0]->key, "k9");
	assert_string_equal(r->keys[0]->tenant, "t2");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	rq.tenant = NULL;
	rq.limit = 3;
	r = (Lunar__ListKeysReply *)call(m, LUNAR__METHOD__LIST_KEYS, &rq);
	assert_int_equal(r->n_keys, 3);
	assert_true(r->truncated);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	rq.pattern = "[";
	assert_int_equal(call_code(m, LUNAR__METHOD__LIST_KEYS, &rq), LUNAR_ERR_INVALID_PARAMS);
	rq.pattern = "(k)\\1";
	assert_int_equal(call_code(m, LUNAR__METHOD__LIST_KEYS, &rq), LUNAR_ERR_INVALID_PARAMS);
	mst_master_destroy(m);
}

static void test_master_list_clients_and_stat(void **state)
{
	/* Given: A with two segments, B pinging; a hard-pinned unfinished put */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__ListClientsRequest lc = LUNAR__LIST_CLIENTS_REQUEST__INIT;
	Lunar__StatKeyRequest sk = LUNAR__STAT_KEY_REQUEST__INIT;
	Lunar__PutStartRequest ps = LUNAR__PUT_START_REQUEST__INIT;
	Lunar__ListClientsReply *r;
	Lunar__StatKeyReply *st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(mount(m, CLIENT_A, "seg-a2", MIB), 0);
	ping(m, CLIENT_B);
	ps.client_id = CLIENT_B;
	ps.key = "p";
	ps.size = 10;
	ps.hard_pin = 1;
	assert_int_equal(call_code(m, LUNAR__METHOD__PUT_START, &ps), 0);
	/* Then: clients are listed with their segment counts */
	r = (Lunar__ListClientsReply *)call(m, LUNAR__METHOD__LIST_CLIENTS, &lc);
	assert_int_equal(r->n_clients, 2);
	for (size_t i = 0; i < 2; i++) {
		assert_true(r->clients[i]->alive);
		assert_int_equal(r->clients[i]->segments,
				 r->clients[i]->client_id == CLIENT_A ? 2 : 0);
	}
	protobuf_c_message_free_unpacked(&r->base, NULL);
	/* and stat shows state, pin and writer; a missing key is not found */
	sk.key = "p";
	st = (Lunar__StatKeyReply *)call(m, LUNAR__METHOD__STAT_KEY, &sk);
	assert_int_equal(st->state, LUNAR__REPLICA_STATE__PROCESSING);
	assert_true(st->hard_pin);
	assert_int_equal(st->writer, CLIENT_B);
	assert_int_equal(st->size, 10);
	protobuf_c_message_free_unpacked(&st->base, NULL);
	sk.key = "nope";
	assert_int_equal(call_code(m, LUNAR__METHOD__STAT_KEY, &sk), LUNAR_ERR_OBJECT_NOT_FOUND);
	mst_master_destroy(m);
}

static void test_master_metrics_and_ready(void **state)
{
	/* Given: a master before and after a mount and some calls */
	struct mst_master *m = master_new(NULL, NULL);
	static const char *const names[] = {
	    "lunar_master_keys ",
	    "lunar_master_processing_keys ",
	    "lunar_master_segments 1",
	    "lunar_master_clients 1",
	    "lunar_master_segment_capacity_bytes{segment=\"seg-a\"} 1048576",
	    "lunar_master_segment_used_bytes{segment=\"seg-a\"} 5056",
	    "lunar_master_calls_total{method=\"PutStart\"} 2",
	    "lunar_master_errors_total{code=\"OBJECT_NOT_FOUND\"} 1",
	    "lunar_master_evictions_total 0",
	    "lunar_master_evicted_bytes_total 0",
	    "lunar_master_discarded_puts_total 0",
	    "lunar_master_value_size_bytes_bucket{le=\"1024\"} 0",
	    "lunar_master_value_size_bytes_bucket{le=\"4096\"} 0",
	    "lunar_master_value_size_bytes_bucket{le=\"16384\"} 1",
	    "lunar_master_value_size_bytes_bucket{le=\"1073741824\"} 1",
	    "lunar_master_value_size_bytes_bucket{le=\"+Inf\"} 1",
	    "lunar_master_value_size_bytes_sum 5000",
	    "lunar_master_value_size_bytes_count 1",
	};
	char *text;
	size_t len;

	assert_int_equal(mst_master_ready(m), 0);
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(mst_master_ready(m), 1);
	assert_int_equal(put(m, CLIENT_A, "k", 5000, 1), 0);
	assert_int_equal(put_start(m, CLIENT_A, "k", 5000, 1), LUNAR_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(get_code(m, "nope"), LUNAR_ERR_OBJECT_NOT_FOUND);
	/* When: rendered; Then: every figure is there with its value */
	assert_int_equal(mst_metrics_render(m, &text, &len), 0);
	assert_int_equal(strlen(text), len);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strstr(text, names[i]))
			fail_msg("missing '%s' in:\n%s", names[i], text);
	free(text);
	mst_master_destroy(m);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_crc_recorded, test_master_upsert_absent_is_put,
		test_master_upsert_old_or_new, test_master_upsert_revoke,
		test_master_late_revoke_holds_space, test_master_remove_by_regex,
		test_master_remove_by_regex_bounds_its_cost,
		test_master_remove_by_regex_matches_outside_the_lock, test_master_batch_remove,
		test_master_tenant_quota, test_master_config_quota_flags,
		test_master_graceful_unmount, test_master_local_first, test_master_list_keys,
		test_master_list_clients_and_stat, test_master_metrics_and_ready)
