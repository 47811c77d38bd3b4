/*
 * test_master_leases.c - the master's read leases driven through
 * mst_dispatch: leases taken by gets and exists per reader, released one by
 * one or all at once, and remove_all counting around them.
 */
#include "test_master_util.h"
#include "tests/cmocka_main.h"

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
	Lunar__BatchGetReplicaListReply *r = batch_get_one(m, client, reader, key);
	uint64_t seq = r->results[0]->code ? 0 : r->results[0]->lease_seq;

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
		r = (Lunar__BatchGetReplicaListReply *)call(
		    m, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, &rq);
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

LUNAR_TEST_MAIN(NULL, NULL, test_master_lease_release, test_master_remove_all_counts)
