/*
 * test_master.c - the master core driven through mst_dispatch with protobuf
 * request structs, as lunar-proxy --embedded-master does: placement, the
 * two-phase put, visibility, removal, argument checks, batches, config flags
 * and concurrent calls. Leases are in test_master_leases.c, clients coming
 * and going in test_master_clients.c.
 */
#include "test_master_util.h"
#include "tests/cmocka_main.h"

static void test_master_replicas_on_distinct_segments(void **state)
{
	/* Given: two segments from two proxies */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__PutStartReply *r;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", MIB), 0);
	/* When: a put asks for two replicas */
	r = put_start_pref(m, CLIENT_A, "k", 1000, 2, NULL);
	/* Then: it gets two PROCESSING ranges on different segments */
	assert_int_equal(r->status->code, 0);
	assert_int_equal(r->n_replicas, 2);
	assert_string_not_equal(r->replicas[0]->segment, r->replicas[1]->segment);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(r->replicas[i]->length, 1000);
		assert_int_equal(r->replicas[i]->state, LUNAR__REPLICA_STATE__PROCESSING);
		assert_string_equal(r->replicas[i]->endpoint, "127.0.0.1:12345");
	}
	protobuf_c_message_free_unpacked(&r->base, NULL);
	mst_master_destroy(m);
}

static void test_master_replicas_best_effort(void **state)
{
	/* Given: one segment */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__PutStartReply *r;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	/* When: a put asks for two replicas */
	r = put_start_pref(m, CLIENT_A, "k", 1000, 2, NULL);
	/* Then: it gets the one it can */
	assert_int_equal(r->status->code, 0);
	assert_int_equal(r->n_replicas, 1);
	assert_string_equal(r->replicas[0]->segment, "seg-a");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	mst_master_destroy(m);
}

static void test_master_processing_invisible(void **state)
{
	/* Given: a started, unfinished put */
	struct mst_master *m = master_new(NULL, NULL);
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put_start(m, CLIENT_A, "k", 100, 1), 0);
	/* Then: readers do not see it, remove refuses it */
	assert_int_equal(exist(m, NULL, "k"), 0);
	assert_int_equal(get_code(m, "k"), LUNAR_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(remove_key(m, "k", 1), LUNAR_ERR_REPLICA_IS_NOT_READY);
	mst_master_stats(m, &st);
	assert_int_equal(st.keys, 0);
	assert_int_equal(st.processing, 1);
	mst_master_destroy(m);
}

static void test_master_put_end_commits(void **state)
{
	/* Given: a put started by A */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__GetReplicaListReply *g;
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put_start(m, CLIENT_A, "k", 100, 1), 0);
	/* When: B tries to commit it, then A does */
	assert_int_equal(put_finish(m, CLIENT_B, "k", 1), LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(put_finish(m, CLIENT_B, "k", 0), LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(put_finish(m, CLIENT_A, "k", 1), 0);
	/* A repeated PutEnd (a retry) is a no-op; one naming other bytes (a
	 * CRC32C not the one committed) is told so rather than OK */
	assert_int_equal(put_finish(m, CLIENT_A, "k", 1), 0);
	{
		Lunar__PutEndRequest rq = LUNAR__PUT_END_REQUEST__INIT;

		rq.client_id = CLIENT_A;
		rq.key = "k";
		rq.crc32c = 0x1234;
		assert_int_equal(call_code(m, LUNAR__METHOD__PUT_END, &rq),
				 LUNAR_ERR_CHECKSUM_MISMATCH);
	}
	/* Then: it is visible with its size, COMPLETE replicas and a lease */
	assert_int_equal(exist(m, "default", "k"), 1);
	g = get(m, "k");
	assert_int_equal(g->status->code, 0);
	assert_int_equal(g->size, 100);
	assert_int_equal(g->n_replicas, 1);
	assert_int_equal(g->replicas[0]->state, LUNAR__REPLICA_STATE__COMPLETE);
	assert_string_equal(g->replicas[0]->segment, "seg-a");
	assert_int_equal(g->lease_ttl_ms, 10000);
	protobuf_c_message_free_unpacked(&g->base, NULL);
	/* and missing keys are reported as such */
	assert_int_equal(put_finish(m, CLIENT_A, "nope", 1), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_code(m, "nope"), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(exist(m, NULL, "nope"), 0);
	mst_master_stats(m, &st);
	assert_int_equal(st.keys, 1);
	assert_int_equal(st.processing, 0);
	mst_master_destroy(m);
}

static void test_master_put_existing(void **state)
{
	/* Given: one committed and one unfinished key */
	struct mst_master *m = master_new(NULL, NULL);

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "done", 100, 1), 0);
	assert_int_equal(put_start(m, CLIENT_A, "busy", 100, 1), 0);
	/* When/Then: putting either again says it exists */
	assert_int_equal(put_start(m, CLIENT_B, "done", 100, 1), LUNAR_ERR_OBJECT_ALREADY_EXISTS);
	assert_int_equal(put_start(m, CLIENT_B, "busy", 100, 1), LUNAR_ERR_OBJECT_ALREADY_EXISTS);
	/* and the same key in another tenant is another object */
	assert_int_equal(exist(m, "other", "done"), 0);
	mst_master_destroy(m);
}

static void test_master_put_discards_stale_start(void **state)
{
	/* Given: a discard timeout of 0, a release timeout of 300ms and an
	 * unfinished put by A */
	static const char *flags[][2] = {{"put-start-discard-timeout", "0ms"},
					 {"put-start-release-timeout", "300ms"}};
	struct mst_master *m = master_with(flags, 2);
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put_start(m, CLIENT_A, "k", 300 * 1024, 1), 0);
	/* When: B puts the same key; Then: it pre-empts A */
	assert_int_equal(put_start(m, CLIENT_B, "k", 300 * 1024, 1), 0);
	assert_int_equal(put_finish(m, CLIENT_A, "k", 1), LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(put_finish(m, CLIENT_B, "k", 1), 0);
	/* and A's space (A may still be writing there) is held until the
	 * release timeout, then given back by housekeeping */
	mst_master_stats(m, &st);
	assert_int_equal(st.used_bytes, 600 * 1024);
	usleep(600 * 1000);
	mst_master_stats(m, &st);
	assert_int_equal(st.used_bytes, 300 * 1024);
	mst_master_destroy(m);
}

static void test_master_revoke_frees_space(void **state)
{
	/* Given: a 1 MiB store holding an unfinished 800 KiB put */
	struct mst_master *m = master_new(NULL, NULL);
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put_start(m, CLIENT_A, "a", 800 * 1024, 1), 0);
	/* When: another 800 KiB comes; Then: the store is full */
	assert_int_equal(put_start(m, CLIENT_A, "b", 800 * 1024, 1), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	/* When: the first put is revoked; Then: its space serves the next */
	assert_int_equal(put_finish(m, CLIENT_A, "a", 0), 0);
	assert_int_equal(get_code(m, "a"), LUNAR_ERR_OBJECT_NOT_FOUND);
	mst_master_stats(m, &st);
	assert_int_equal(st.used_bytes, 0);
	assert_int_equal(st.processing, 0);
	assert_int_equal(put_start(m, CLIENT_A, "b", 800 * 1024, 1), 0);
	mst_master_destroy(m);
}

/* ReMountSegment of n segments "<prefix>-<i>" of 1 MiB by client: the reply
 * (caller frees). */
static Lunar__ReMountSegmentReply *remount(struct mst_master *m, uint64_t client,
					   const char *prefix, size_t n)
{
	Lunar__ReMountSegmentRequest rq = LUNAR__RE_MOUNT_SEGMENT_REQUEST__INIT;
	Lunar__SegmentDesc d[MST_SEGMENTS_PER_CLIENT + 1], *dp[MST_SEGMENTS_PER_CLIENT + 1];
	char names[MST_SEGMENTS_PER_CLIENT + 1][32];
	Lunar__ReMountSegmentReply *r;

	assert_true(n <= MST_SEGMENTS_PER_CLIENT + 1);
	for (size_t i = 0; i < n; i++) {
		lunar__segment_desc__init(&d[i]);
		snprintf(names[i], sizeof(names[i]), "%s-%zu", prefix, i);
		d[i].name = names[i];
		d[i].endpoint = "127.0.0.1:12345";
		d[i].size = MIB;
		dp[i] = &d[i];
	}
	rq.client_id = client;
	rq.segments = dp;
	rq.n_segments = n;
	r = (Lunar__ReMountSegmentReply *)call(m, LUNAR__METHOD__REMOUNT_SEGMENT, &rq);
	assert_non_null(r);
	return r;
}

static void test_master_remount_segments(void **state)
{
	/* Given: B holds "b-0" */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__ReMountSegmentReply *r;
	struct mst_stats st;

	(void)state;
	assert_int_equal(mount(m, CLIENT_B, "b-0", MIB), 0);
	/* When: A re-mounts two segments, twice; Then: both are mounted, the
	 * second time as a no-op */
	for (int round = 0; round < 2; round++) {
		r = remount(m, CLIENT_A, "a", 2);
		assert_int_equal(r->status->code, 0);
		assert_int_equal(r->n_codes, 2);
		assert_int_equal(r->codes[0], 0);
		assert_int_equal(r->codes[1], 0);
		protobuf_c_message_free_unpacked(&r->base, NULL);
	}
	mst_master_stats(m, &st);
	assert_int_equal(st.segments, 3);
	assert_int_equal(st.capacity_bytes, 3 * MIB);
	/* and a segment another live client holds is refused, per segment */
	r = remount(m, CLIENT_A, "b", 2);
	assert_int_equal(r->codes[0], LUNAR_ERR_SEGMENT_ALREADY_EXISTS);
	assert_int_equal(r->codes[1], 0);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	/* and more segments than a client may hold, as a whole */
	r = remount(m, CLIENT_A, "c", MST_SEGMENTS_PER_CLIENT + 1);
	assert_int_equal(r->status->code, LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(r->n_codes, 0);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	mst_master_destroy(m);
}

static void test_master_no_segments(void **state)
{
	/* Given: no segment at all; Then: a put is back-pressured */
	struct mst_master *m = master_new(NULL, NULL);

	assert_int_equal(put_start(m, CLIENT_A, "k", 1, 1), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	mst_master_destroy(m);
}

static void test_master_remove_lease(void **state)
{
	/* Given: a committed key just read (leased) */
	struct mst_master *m = master_new(NULL, NULL);
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k", 100, 1), 0);
	assert_int_equal(exist(m, NULL, "k"), 1);
	/* When/Then: remove refuses it, forced remove takes it */
	assert_int_equal(remove_key(m, "k", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(remove_key(m, "k", 1), 0);
	assert_int_equal(remove_key(m, "k", 1), LUNAR_ERR_OBJECT_NOT_FOUND);
	mst_master_stats(m, &st);
	assert_int_equal(st.keys, 0);
	assert_int_equal(st.used_bytes, 0);
	mst_master_destroy(m);
}

static void test_master_remove_unleased(void **state)
{
	/* Given: a zero lease TTL; Then: a read key is removable unforced */
	struct mst_master *m = master_new("kv-lease-ttl", "0ms");

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k", 100, 1), 0);
	assert_int_equal(exist(m, NULL, "k"), 1);
	assert_int_equal(remove_key(m, "k", 0), 0);
	mst_master_destroy(m);
}

static void test_master_invalid_params(void **state)
{
	/* Given: one segment */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__ExistKeyRequest ek = LUNAR__EXIST_KEY_REQUEST__INIT;
	ProtobufCMessage *rep = NULL;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	/* Then: bad keys, sizes and tenants are refused with their codes */
	assert_int_equal(put_start(m, CLIENT_A, "", 10, 1), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(put_start(m, CLIENT_A, "a\tb", 10, 1), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(put_start(m, CLIENT_A, "\xff", 10, 1), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(put_start(m, CLIENT_A, "k", 0, 1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(exist(m, "bad tenant", "k"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(remove_key(m, "", 0), LUNAR_ERR_INVALID_KEY);
	/* and bad segments too */
	assert_int_equal(mount(m, CLIENT_A, "seg-z", 0), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mount(m, CLIENT_A, "", MIB), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mount(m, CLIENT_B, "seg-a", MIB), LUNAR_ERR_SEGMENT_ALREADY_EXISTS);
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	/* and one client's mounts are bounded (each costs the master memory),
	 * while its remounts and another client's mounts still work */
	for (int i = 1; i < MST_SEGMENTS_PER_CLIENT; i++) {
		char name[32];

		snprintf(name, sizeof(name), "seg-a%d", i);
		assert_int_equal(mount(m, CLIENT_A, name, MIB), 0);
	}
	assert_int_equal(mount(m, CLIENT_A, "seg-one-too-many", MIB),
			 LUNAR_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", MIB), 0);
	/* and a request of the wrong type or method is a protocol error */
	assert_int_equal(mst_dispatch(m, LUNAR__METHOD__PING, &ek.base, &rep), LUNAR_ERR_PROTOCOL);
	assert_int_equal(mst_dispatch(m, 999, &ek.base, &rep), LUNAR_ERR_PROTOCOL);
	mst_master_destroy(m);
}

static void batch_keys(Lunar__BatchKeysRequest *rq, char **keys, size_t n)
{
	rq->client_id = CLIENT_A;
	rq->keys = keys;
	rq->n_keys = n;
}

static void test_master_batch_index_aligned(void **state)
{
	/* Given: a batch of three puts, the middle one with a bad key */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__BatchPutStartRequest bp = LUNAR__BATCH_PUT_START_REQUEST__INIT;
	Lunar__PutStartRequest it[3] = {LUNAR__PUT_START_REQUEST__INIT,
					LUNAR__PUT_START_REQUEST__INIT,
					LUNAR__PUT_START_REQUEST__INIT};
	Lunar__PutStartRequest *items[3] = {&it[0], &it[1], &it[2]};
	char *keys[4] = {"b0", "", "b2", "b3"};
	Lunar__BatchKeysRequest bk = LUNAR__BATCH_KEYS_REQUEST__INIT;
	Lunar__BatchPutEndRequest pe = LUNAR__BATCH_PUT_END_REQUEST__INIT;
	Lunar__BatchPutStartReply *pr;
	Lunar__BatchCodesReply *cr;
	Lunar__BatchGetReplicaListReply *gr;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	for (int i = 0; i < 3; i++) {
		it[i].key = keys[i];
		it[i].size = 100;
	}
	bp.client_id = CLIENT_A;
	bp.items = items;
	bp.n_items = 3;
	/* When: the batch starts; Then: results line up with the items */
	pr = (Lunar__BatchPutStartReply *)call(m, LUNAR__METHOD__BATCH_PUT_START, &bp);
	assert_int_equal(pr->n_results, 3);
	assert_int_equal(pr->results[0]->code, 0);
	assert_int_equal(pr->results[0]->n_replicas, 1);
	assert_int_equal(pr->results[1]->code, LUNAR_ERR_INVALID_KEY);
	assert_int_equal(pr->results[2]->code, 0);
	protobuf_c_message_free_unpacked(&pr->base, NULL);
	/* When: b0 is committed by batch and b2 revoked by batch */
	pe.client_id = CLIENT_A;
	pe.keys = keys;
	pe.n_keys = 2;
	cr = (Lunar__BatchCodesReply *)call(m, LUNAR__METHOD__BATCH_PUT_END, &pe);
	assert_int_equal(cr->n_codes, 2);
	assert_int_equal(cr->codes[0], 0);
	assert_int_equal(cr->codes[1], LUNAR_ERR_INVALID_KEY);
	protobuf_c_message_free_unpacked(&cr->base, NULL);
	batch_keys(&bk, keys + 2, 2);
	cr = (Lunar__BatchCodesReply *)call(m, LUNAR__METHOD__BATCH_PUT_REVOKE, &bk);
	assert_int_equal(cr->codes[0], 0);
	assert_int_equal(cr->codes[1], LUNAR_ERR_OBJECT_NOT_FOUND);
	protobuf_c_message_free_unpacked(&cr->base, NULL);
	/* Then: exists and get answer per key, in order */
	batch_keys(&bk, keys, 4);
	cr = (Lunar__BatchCodesReply *)call(m, LUNAR__METHOD__BATCH_EXIST_KEY, &bk);
	assert_int_equal(cr->n_codes, 4);
	assert_int_equal(cr->codes[0], 1);
	assert_int_equal(cr->codes[1], LUNAR_ERR_INVALID_KEY);
	assert_int_equal(cr->codes[2], 0);
	assert_int_equal(cr->codes[3], 0);
	protobuf_c_message_free_unpacked(&cr->base, NULL);
	gr = (Lunar__BatchGetReplicaListReply *)call(m, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, &bk);
	assert_int_equal(gr->n_results, 4);
	assert_int_equal(gr->results[0]->code, 0);
	assert_int_equal(gr->results[0]->size, 100);
	assert_int_equal(gr->results[0]->n_replicas, 1);
	assert_int_equal(gr->results[1]->code, LUNAR_ERR_INVALID_KEY);
	assert_int_equal(gr->results[2]->code, LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(gr->results[3]->code, LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(gr->lease_ttl_ms, 10000);
	protobuf_c_message_free_unpacked(&gr->base, NULL);
	mst_master_destroy(m);
}

static void test_master_batch_too_large(void **state)
{
	/* Given: a batch over LUNAR_BATCH_MAX keys */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__BatchKeysRequest bk = LUNAR__BATCH_KEYS_REQUEST__INIT;
	char **keys = calloc(LUNAR_BATCH_MAX + 1, sizeof(*keys));

	assert_non_null(keys);
	for (int i = 0; i <= LUNAR_BATCH_MAX; i++)
		keys[i] = "k";
	batch_keys(&bk, keys, LUNAR_BATCH_MAX + 1);
	/* Then: the whole call fails */
	assert_int_equal(call_code(m, LUNAR__METHOD__BATCH_EXIST_KEY, &bk),
			 LUNAR_ERR_INVALID_PARAMS);
	free(keys);
	mst_master_destroy(m);
}

static void test_master_config_flags(void **state)
{
	/* Given: defaults */
	struct mst_config cfg;

	mst_config_defaults(&cfg);
	assert_int_equal(cfg.kv_lease_ttl_ms, 10000);
	assert_int_equal(cfg.put_start_release_timeout_ms, 600000);
	/* Then: good values apply, bad ones and unknown names are refused */
	assert_int_equal(mst_config_set(&cfg, "client-ttl", "3s"), 0);
	assert_int_equal(cfg.client_ttl_ms, 3000);
	assert_int_equal(mst_config_set(&cfg, "allocation-strategy", "free_ratio_first"), 0);
	assert_int_equal(cfg.strategy, MST_ALLOC_FREE_RATIO_FIRST);
	assert_int_equal(mst_config_set(&cfg, "allow-evict-soft-pinned", "false"), 0);
	assert_int_equal(cfg.allow_evict_soft_pinned, 0);
	assert_int_equal(mst_config_set(&cfg, "eviction-ratio", "1.5"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "allocation-strategy", "best"),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "allow-evict-soft-pinned", "yes"),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "no-such-flag", "1"), MST_CONFIG_UNKNOWN);
	assert_non_null(strstr(mst_config_usage(), "--client-ttl"));
}

static void test_master_free_ratio_first(void **state)
{
	/* Given: free_ratio_first and a fuller seg-a */
	struct mst_master *m = master_new("allocation-strategy", "free_ratio_first");
	Lunar__PutStartReply *r;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "big", MIB / 2, 1), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", MIB), 0);
	/* When/Then: new puts go to the emptier seg-b */
	for (int i = 0; i < 4; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		r = put_start_pref(m, CLIENT_A, key, 1000, 1, NULL);
		assert_string_equal(r->replicas[0]->segment, "seg-b");
		protobuf_c_message_free_unpacked(&r->base, NULL);
	}
	mst_master_destroy(m);
}

struct worker_arg {
	struct mst_master *m;
	int id;
};

static void *worker(void *p)
{
	struct worker_arg *a = p;
	char key[32];

	for (int i = 0; i < 500; i++) {
		snprintf(key, sizeof(key), "w%d-%d", a->id, i);
		if (put(a->m, (uint64_t)a->id + 1, key, 1000, 2) != 0)
			return p; /* the main thread sees the missing key */
		if (exist(a->m, NULL, key) != 1 ||
		    remove_key(a->m, key, i % 2 == 0) != (i % 2 ? LUNAR_ERR_OBJECT_HAS_LEASE : 0))
			return p;
	}
	return NULL;
}

static void test_master_concurrent_calls(void **state)
{
	/* Given: three segments and eight threads */
	struct mst_master *m = master_new(NULL, NULL);
	struct worker_arg args[8];
	pthread_t t[8];
	struct mst_stats st;
	void *ret;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", 64 * MIB), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", 64 * MIB), 0);
	assert_int_equal(mount(m, 3, "seg-c", 64 * MIB), 0);
	/* When: each puts, reads and removes its own keys at once */
	for (int i = 0; i < 8; i++) {
		args[i] = (struct worker_arg){m, i};
		assert_int_equal(pthread_create(&t[i], NULL, worker, &args[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(t[i], &ret), 0);
		assert_null(ret);
	}
	/* Then: every call answered as alone; the leased half remains */
	mst_master_stats(m, &st);
	assert_int_equal(st.keys, 8 * 250);
	assert_int_equal(st.processing, 0);
	assert_int_equal(st.used_bytes, 8 * 250 * 2 * 1024);
	mst_master_destroy(m);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_replicas_on_distinct_segments,
		test_master_replicas_best_effort, test_master_processing_invisible,
		test_master_put_end_commits, test_master_put_existing,
		test_master_put_discards_stale_start, test_master_revoke_frees_space,
		test_master_remount_segments, test_master_no_segments, test_master_remove_lease,
		test_master_remove_unleased, test_master_invalid_params,
		test_master_batch_index_aligned, test_master_batch_too_large,
		test_master_config_flags, test_master_free_ratio_first,
		test_master_concurrent_calls)
