/*
 * test_master_clients.c - clients of the master coming and going, driven
 * through mst_dispatch: a client's TTL expiring frees its puts and leases,
 * clients expiring together, a ping from an unknown client, and an unmount
 * dropping the replicas on the segment.
 */
#include "test_master_util.h"
#include "tests/cmocka_main.h"

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

LUNAR_TEST_MAIN(NULL, NULL, test_master_client_ttl_expiry, test_master_clients_expire_together,
		test_master_ping_unknown_client, test_master_unmount_drops_replicas)
