/*
 * test_master.c - the master core driven through mst_dispatch with protobuf
 * request structs, as lunar-proxy --embedded-master does: placement, the
 * two-phase put, visibility, leases, removal, client death, batches.
 */
#include "test_master_util.h"

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
static Lunar__BatchCodesReply *remount(struct mst_master *m, uint64_t client, const char *prefix,
				       size_t n)
{
	Lunar__ReMountSegmentRequest rq = LUNAR__RE_MOUNT_SEGMENT_REQUEST__INIT;
	Lunar__SegmentDesc d[MST_SEGMENTS_PER_CLIENT + 1], *dp[MST_SEGMENTS_PER_CLIENT + 1];
	char names[MST_SEGMENTS_PER_CLIENT + 1][32];
	Lunar__BatchCodesReply *r;

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
	r = (Lunar__BatchCodesReply *)call(m, LUNAR__METHOD__REMOUNT_SEGMENT, &rq);
	assert_non_null(r);
	return r;
}

static void test_master_remount_segments(void **state)
{
	/* Given: B holds "b-0" */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__BatchCodesReply *r;
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

/* A BatchKeysRequest of client for reader naming the one key *key. */
static Lunar__BatchKeysRequest one_key(uint64_t client, uint64_t reader, char **key)
{
	Lunar__BatchKeysRequest rq = LUNAR__BATCH_KEYS_REQUEST__INIT;

	rq.client_id = client;
	rq.reader = reader;
	rq.keys = key;
	rq.n_keys = 1;
	return rq;
}

/* Dispatch a one-key request answered in BatchCodesReply: the key's code. */
static int one_code(struct mst_master *m, uint32_t method, const void *rq)
{
	Lunar__BatchCodesReply *r = (Lunar__BatchCodesReply *)call(m, method, rq);
	int code;

	assert_int_equal(r->status->code, 0);
	assert_int_equal(r->n_codes, 1);
	code = r->codes[0];
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return code;
}

/* BatchGetReplicaList of one key by client for reader: its lease_seq (0 on
 * a miss). */
static uint64_t lease_get_for(struct mst_master *m, uint64_t client, uint64_t reader,
			      const char *key)
{
	char *k = (char *)key;
	Lunar__BatchKeysRequest rq = one_key(client, reader, &k);
	Lunar__BatchGetReplicaListReply *r;
	uint64_t seq;

	r = (Lunar__BatchGetReplicaListReply *)call(m, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, &rq);
	assert_int_equal(r->n_results, 1);
	seq = r->results[0]->code ? 0 : r->results[0]->lease_seq;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return seq;
}

static uint64_t lease_get(struct mst_master *m, uint64_t client, const char *key)
{
	return lease_get_for(m, client, 0, key);
}

/* BatchExistKey of one key by client. */
static int lease_exist(struct mst_master *m, uint64_t client, const char *key)
{
	char *k = (char *)key;
	Lunar__BatchKeysRequest rq = one_key(client, 0, &k);

	return one_code(m, LUNAR__METHOD__BATCH_EXIST_KEY, &rq);
}

/* BatchLeaseRelease of one key by client for reader: the key's code. */
static int lease_release_for(struct mst_master *m, uint64_t client, uint64_t reader,
			     const char *key, uint64_t seq)
{
	Lunar__LeaseReleaseRequest rq = LUNAR__LEASE_RELEASE_REQUEST__INIT;
	char *k = (char *)key;

	rq.client_id = client;
	rq.keys = &k;
	rq.n_keys = rq.n_lease_seqs = rq.n_readers = 1;
	rq.lease_seqs = &seq;
	rq.readers = &reader;
	return one_code(m, LUNAR__METHOD__BATCH_LEASE_RELEASE, &rq);
}

static int lease_release(struct mst_master *m, uint64_t client, const char *key, uint64_t seq)
{
	return lease_release_for(m, client, 0, key, seq);
}

static void test_master_lease_release(void **state)
{
	/* Given: keys committed by A */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__LeaseReleaseRequest bad = LUNAR__LEASE_RELEASE_REQUEST__INIT;
	char *keys[2] = {"k1", "k2"};
	uint64_t s1, s2;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(put(m, CLIENT_A, keys[i], 100, 1), 0);
	/* When: A's read lease is released; Then: an unforced remove works */
	s1 = lease_get(m, CLIENT_A, "k1");
	assert_true(s1 > 0);
	assert_int_equal(remove_key(m, "k1", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(lease_release(m, CLIENT_A, "k1", s1), 0);
	assert_int_equal(remove_key(m, "k1", 0), 0);
	assert_int_equal(lease_release(m, CLIENT_A, "k1", s1), LUNAR_ERR_OBJECT_NOT_FOUND);

	/* A key removed and put again: its old lease number releases nothing */
	assert_int_equal(put(m, CLIENT_A, "k1", 100, 1), 0);
	assert_true(lease_get(m, CLIENT_A, "k1") > s1);
	assert_int_equal(lease_release(m, CLIENT_A, "k1", s1), LUNAR_ERR_OBJECT_HAS_LEASE);

	/* A grant since (A's own again): the older sequence releases nothing */
	s1 = lease_get(m, CLIENT_A, "k2");
	s2 = lease_get(m, CLIENT_A, "k2");
	assert_true(s2 > s1);
	assert_int_equal(lease_release(m, CLIENT_A, "k2", s1), LUNAR_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(lease_release(m, CLIENT_A, "k2", s2), 0);
	assert_int_equal(remove_key(m, "k2", 0), 0);

	/* Another caller's lease after A's: A cannot release it */
	assert_int_equal(put(m, CLIENT_A, "k2", 100, 1), 0);
	s1 = lease_get(m, CLIENT_A, "k2");
	assert_int_equal(lease_exist(m, CLIENT_B, "k2"), 1);
	assert_int_equal(lease_release(m, CLIENT_A, "k2", s1), LUNAR_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(remove_key(m, "k2", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	/* ... nor one before A's: releasing A's leaves B's */
	s2 = lease_get(m, CLIENT_A, "k2");
	assert_int_equal(lease_release(m, CLIENT_A, "k2", s2), 0);
	assert_int_equal(remove_key(m, "k2", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	/* ... nor a caller without a client_id (ExistKey) */
	assert_int_equal(remove_key(m, "k2", 1), 0);
	assert_int_equal(put(m, CLIENT_A, "k2", 100, 1), 0);
	s1 = lease_get(m, CLIENT_A, "k2");
	assert_int_equal(exist(m, NULL, "k2"), 1);
	assert_int_equal(lease_release(m, CLIENT_A, "k2", s1), LUNAR_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(lease_release(m, 0, "k2", 0), LUNAR_ERR_INVALID_PARAMS);

	/* Two readers of one caller: each lease is its own. Reader 2's lookup
	 * granted before reader 1's stays when reader 1's is released */
	assert_int_equal(remove_key(m, "k2", 1), 0);
	assert_int_equal(put(m, CLIENT_A, "k2", 100, 1), 0);
	s1 = lease_get_for(m, CLIENT_A, 2, "k2");
	s2 = lease_get_for(m, CLIENT_A, 1, "k2");
	assert_int_equal(lease_release_for(m, CLIENT_A, 2, "k2", s1), LUNAR_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(lease_release_for(m, CLIENT_A, 2, "k2", s2), LUNAR_ERR_OBJECT_HAS_LEASE);
	assert_int_equal(lease_release_for(m, CLIENT_A, 1, "k2", s2), 0);
	assert_int_equal(remove_key(m, "k2", 0), LUNAR_ERR_OBJECT_HAS_LEASE);

	/* Lookups for several readers at once (a proxy's renewals): each key's
	 * lease goes to its own reader, and that reader's release ends it */
	{
		Lunar__BatchKeysRequest rq = LUNAR__BATCH_KEYS_REQUEST__INIT;
		Lunar__BatchGetReplicaListReply *r;
		uint64_t readers[2] = {7, 8};

		for (int i = 0; i < 2; i++) {
			assert_int_equal(remove_key(m, keys[i], 1), 0);
			assert_int_equal(put(m, CLIENT_A, keys[i], 100, 1), 0);
		}
		rq.client_id = CLIENT_A;
		rq.reader = 9; /* the per-key readers win */
		rq.keys = keys;
		rq.n_keys = 2;
		rq.readers = readers;
		rq.n_readers = 2;
		r = (Lunar__BatchGetReplicaListReply *)call(m, LUNAR__METHOD__BATCH_GET_REPLICA_LIST,
							    &rq);
		assert_int_equal(r->n_results, 2);
		s1 = r->results[0]->lease_seq;
		s2 = r->results[1]->lease_seq;
		protobuf_c_message_free_unpacked(&r->base, NULL);
		assert_int_equal(lease_release_for(m, CLIENT_A, 9, "k1", s1),
				 LUNAR_ERR_OBJECT_HAS_LEASE);
		assert_int_equal(lease_release_for(m, CLIENT_A, 7, "k1", s1), 0);
		assert_int_equal(lease_release_for(m, CLIENT_A, 7, "k2", s2),
				 LUNAR_ERR_OBJECT_HAS_LEASE);
		assert_int_equal(lease_release_for(m, CLIENT_A, 8, "k2", s2), 0);
		assert_int_equal(remove_key(m, "k1", 0), 0);
		assert_int_equal(remove_key(m, "k2", 0), 0);
		/* ... and not one reader for some of the keys */
		rq.n_readers = 1;
		assert_int_equal(call_code(m, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, &rq),
				 LUNAR_ERR_INVALID_PARAMS);
	}

	/* A batch without one sequence and one reader per key is refused whole */
	bad.client_id = CLIENT_A;
	bad.keys = keys;
	bad.n_keys = 2;
	bad.lease_seqs = &s1;
	bad.n_lease_seqs = 1;
	assert_int_equal(call_code(m, LUNAR__METHOD__BATCH_LEASE_RELEASE, &bad),
			 LUNAR_ERR_INVALID_PARAMS);
	mst_master_destroy(m);
}

static void test_master_remove_all_counts(void **state)
{
	/* Given: three committed keys (one leased), one unfinished, one in tenant t2 */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;
	Lunar__PutEndRequest end = LUNAR__PUT_END_REQUEST__INIT;
	ProtobufCMessage *rep;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k1", 10, 1), 0);
	assert_int_equal(put(m, CLIENT_A, "k2", 10, 1), 0);
	assert_int_equal(put(m, CLIENT_A, "k3", 10, 1), 0);
	assert_int_equal(put_start(m, CLIENT_A, "k4", 10, 1), 0);
	rq.client_id = CLIENT_A;
	rq.tenant = "t2";
	rq.key = "k1";
	rq.size = 10;
	rep = call(m, LUNAR__METHOD__PUT_START, &rq);
	assert_int_equal(lp_status(rep)->code, 0);
	protobuf_c_message_free_unpacked(rep, NULL);
	end.client_id = CLIENT_A;
	end.tenant = "t2";
	end.key = "k1";
	assert_int_equal(call_code(m, LUNAR__METHOD__PUT_END, &end), 0);
	assert_int_equal(exist(m, NULL, "k2"), 1);
	/* When/Then: unforced skips the leased key, forced takes it */
	assert_int_equal(remove_all(m, "", 0), 2);
	assert_int_equal(remove_all(m, "default", 1), 1);
	/* and the unfinished key and the other tenant stay */
	assert_int_equal(get_code(m, "k4"), LUNAR_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(remove_all(m, "default", 1), 0);
	assert_int_equal(exist(m, "t2", "k1"), 1);
	assert_int_equal(remove_all(m, "t2", 1), 1);
	assert_int_equal(put_finish(m, CLIENT_A, "k4", 1), 0);
	mst_master_destroy(m);
}

/* Wait past client_ttl while keeping B alive. */
static void wait_keeping_b(struct mst_master *m, unsigned ms)
{
	for (unsigned t = 0; t < ms; t += 50) {
		ping(m, CLIENT_B);
		usleep(50 * 1000);
	}
}

static void test_master_client_ttl_expiry(void **state)
{
	/* Given: client_ttl 200ms; A owns seg-a, B owns seg-b;
	 * x on both, y only on seg-a, z unfinished by A on seg-b, w by B on seg-b */
	struct mst_master *m = master_new("client-ttl", "200ms");
	Lunar__PutStartReply *r;
	Lunar__GetReplicaListReply *g;
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "x", 1000, 2), 0);
	r = put_start_pref(m, CLIENT_A, "y", 1000, 1, "seg-a");
	assert_string_equal(r->replicas[0]->segment, "seg-a");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	assert_int_equal(put_finish(m, CLIENT_A, "y", 1), 0);
	r = put_start_pref(m, CLIENT_A, "z", 1000, 1, "seg-b");
	assert_string_equal(r->replicas[0]->segment, "seg-b");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	r = put_start_pref(m, CLIENT_B, "w", 1000, 1, "seg-b");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	/* When: A falls silent past its TTL while B pings */
	wait_keeping_b(m, 600);
	/* Then: x keeps its seg-b replica, y is gone, z is revoked, w stays */
	g = get(m, "x");
	assert_int_equal(g->status->code, 0);
	assert_int_equal(g->n_replicas, 1);
	assert_string_equal(g->replicas[0]->segment, "seg-b");
	protobuf_c_message_free_unpacked(&g->base, NULL);
	assert_int_equal(get_code(m, "y"), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_code(m, "z"), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_code(m, "w"), LUNAR_ERR_REPLICA_IS_NOT_READY);
	mst_master_stats(m, &st);
	assert_int_equal(st.segments, 1);
	assert_int_equal(st.clients, 1);
	assert_int_equal(st.keys, 1);
	assert_int_equal(st.processing, 1);
	assert_int_equal(st.capacity_bytes, MIB);
	/* x and w, 64-byte aligned, and z's range: A may only be asleep and
	 * write on, so it goes back after put_start_release_timeout */
	assert_int_equal(st.used_bytes, 3 * 1024);
	/* and A, back, is told to remount */
	assert_int_equal(ping(m, CLIENT_A), 1);
	mst_master_destroy(m);
}

static void test_master_clients_expire_together(void **state)
{
	/* Given: A and C each with an unfinished put on B's segment, and 2000
	 * made-up client ids pinged once (each used to cost a sweep of every
	 * object when it expired) */
	struct mst_master *m = master_new("client-ttl", "200ms");
	Lunar__PutStartReply *r;
	struct mst_stats st;
	char key[32];

	assert_int_equal(mount(m, CLIENT_B, "seg-b", MIB), 0);
	r = put_start_pref(m, CLIENT_A, "za", 1000, 1, "seg-b");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	r = put_start_pref(m, 0xc3, "zc", 1000, 1, "seg-b");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	r = put_start_pref(m, CLIENT_B, "w", 1000, 1, "seg-b");
	protobuf_c_message_free_unpacked(&r->base, NULL);
	for (int i = 0; i < 100; i++) {
		snprintf(key, sizeof(key), "kept-%d", i);
		assert_int_equal(put(m, CLIENT_B, key, 64, 1), 0);
	}
	ping(m, CLIENT_A);
	ping(m, 0xc3);
	for (uint64_t id = 0xf00000; id < 0xf00000 + 2000; id++)
		ping(m, id);
	/* When: all but B fall silent past the TTL */
	wait_keeping_b(m, 600);
	/* Then: both unfinished puts are revoked in the same round, B's stays,
	 * and only B is left */
	assert_int_equal(get_code(m, "za"), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_code(m, "zc"), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_code(m, "w"), LUNAR_ERR_REPLICA_IS_NOT_READY);
	mst_master_stats(m, &st);
	assert_int_equal(st.clients, 1);
	assert_int_equal(st.keys, 100);
	assert_int_equal(st.processing, 1);
	mst_master_destroy(m);
}

static void test_master_ping_unknown_client(void **state)
{
	/* Given: a fresh master */
	struct mst_master *m = master_new(NULL, NULL);

	/* When/Then: an unknown client must remount, a known one need not */
	assert_int_equal(ping(m, 42), 1);
	assert_int_equal(ping(m, 42), 0);
	/* and mounting registers a client */
	assert_int_equal(mount(m, 43, "s", MIB), 0);
	assert_int_equal(ping(m, 43), 0);
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

static void test_master_unmount_drops_replicas(void **state)
{
	/* Given: a key on seg-a only */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__UnmountSegmentRequest rq = LUNAR__UNMOUNT_SEGMENT_REQUEST__INIT;
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k", 100, 1), 0);
	rq.client_id = CLIENT_B;
	rq.name = "seg-a";
	/* When/Then: only the owner may unmount; the key goes with it */
	assert_int_equal(call_code(m, LUNAR__METHOD__UNMOUNT_SEGMENT, &rq),
			 LUNAR_ERR_ILLEGAL_CLIENT);
	rq.client_id = CLIENT_A;
	assert_int_equal(call_code(m, LUNAR__METHOD__UNMOUNT_SEGMENT, &rq), 0);
	assert_int_equal(call_code(m, LUNAR__METHOD__UNMOUNT_SEGMENT, &rq),
			 LUNAR_ERR_SEGMENT_NOT_FOUND);
	assert_int_equal(get_code(m, "k"), LUNAR_ERR_OBJECT_NOT_FOUND);
	mst_master_stats(m, &st);
	assert_int_equal(st.segments, 0);
	assert_int_equal(st.keys, 0);
	assert_int_equal(st.capacity_bytes, 0);
	assert_int_equal(st.used_bytes, 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_master_replicas_on_distinct_segments),
	    cmocka_unit_test(test_master_replicas_best_effort),
	    cmocka_unit_test(test_master_processing_invisible),
	    cmocka_unit_test(test_master_put_end_commits),
	    cmocka_unit_test(test_master_put_existing),
	    cmocka_unit_test(test_master_put_discards_stale_start),
	    cmocka_unit_test(test_master_revoke_frees_space),
	    cmocka_unit_test(test_master_remount_segments),
	    cmocka_unit_test(test_master_no_segments),
	    cmocka_unit_test(test_master_remove_lease),
	    cmocka_unit_test(test_master_remove_unleased),
	    cmocka_unit_test(test_master_lease_release),
	    cmocka_unit_test(test_master_remove_all_counts),
	    cmocka_unit_test(test_master_client_ttl_expiry),
	    cmocka_unit_test(test_master_clients_expire_together),
	    cmocka_unit_test(test_master_ping_unknown_client),
	    cmocka_unit_test(test_master_invalid_params),
	    cmocka_unit_test(test_master_unmount_drops_replicas),
	    cmocka_unit_test(test_master_batch_index_aligned),
	    cmocka_unit_test(test_master_batch_too_large),
	    cmocka_unit_test(test_master_config_flags),
	    cmocka_unit_test(test_master_free_ratio_first),
	    cmocka_unit_test(test_master_concurrent_calls),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
