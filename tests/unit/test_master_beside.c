/*
 * test_master_beside.c - a value committed beside its write
 * (PutCommitItem.beside), whose bytes may land after the commit: when it
 * goes before its reservation ends (removed here), its range stays in use,
 * where a value committed after its write gives its range back at once,
 * and readers are told it may be landing. Both last until its writer says
 * (Landed) the writes below it are done or releases the reservation, or,
 * when the reservation ends late (a write may have failed part-way), until
 * its late end. BatchPutUncommit takes back only that object (the
 * caller's, committed beside at that offset) and gives its range back
 * late.
 */
#include "test_master_util.h"

#include "atomic.h"
#include "master/mst_int.h"
#include "tests/cmocka_main.h"

#define VALUE 4096u

struct resv {
	uint64_t id, off, align;
};

static struct resv reserve(struct mst_master *m)
{
	Lunar__ReserveRequest rq = LUNAR__RESERVE_REQUEST__INIT;
	Lunar__ReserveReply *r;
	struct resv v;

	rq.client_id = CLIENT_A;
	rq.size = MIB;
	r = (Lunar__ReserveReply *)call(m, LUNAR__METHOD__RESERVE, &rq);
	assert_int_equal(r->status->code, 0);
	assert_true(r->reservation->beside);
	v = (struct resv){r->reservation->id, r->reservation->extent->offset,
			  r->reservation->align};
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return v;
}

static struct mst_master *master_reserved(struct resv *v)
{
	struct mst_master *m = master_new(NULL, NULL);

	assert_int_equal(mount(m, CLIENT_A, "seg-a", 64 * MIB), 0);
	*v = reserve(m);
	return m;
}

/* Commit (or take back: uncommit) key at piece n of v, from client. */
static int commit_call(struct mst_master *m, uint64_t client, const struct resv *v, unsigned n,
		       const char *key, int beside, int uncommit)
{
	Lunar__BatchPutCommitRequest rq = LUNAR__BATCH_PUT_COMMIT_REQUEST__INIT;
	Lunar__PutCommitItem it = LUNAR__PUT_COMMIT_ITEM__INIT, *p = &it;
	ProtobufCMessage *rep;
	int code;

	it.key = (char *)key;
	it.size = VALUE;
	it.crc32c = 0x1234;
	it.reservation = v->id;
	it.offset = v->off + n * (VALUE > v->align ? VALUE : v->align);
	it.beside = beside;
	rq.client_id = client;
	rq.items = &p;
	rq.n_items = 1;
	rep = call(
	    m, uncommit ? LUNAR__METHOD__BATCH_PUT_UNCOMMIT : LUNAR__METHOD__BATCH_PUT_COMMIT, &rq);
	code = lp_status(rep)->code;
	if (!code && uncommit) {
		assert_int_equal(((Lunar__BatchCodesReply *)rep)->n_codes, 1);
		code = ((Lunar__BatchCodesReply *)rep)->codes[0];
	} else if (!code) {
		assert_int_equal(((Lunar__BatchPutStartReply *)rep)->n_results, 1);
		code = ((Lunar__BatchPutStartReply *)rep)->results[0]->code;
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	return code;
}

/* BatchGetReplicaList of key: whether the master says it may be landing. */
static int landing(struct mst_master *m, const char *key)
{
	Lunar__BatchGetReplicaListReply *r = batch_get_one(m, CLIENT_A, 0, key);
	int got = r->results[0]->landing;

	assert_int_equal(r->results[0]->code, 0);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return got;
}

/* ReserveRelease of v: its writes done, or (late) perhaps not. */
static void release_as(struct mst_master *m, const struct resv *v, int late)
{
	Lunar__ReserveReleaseRequest rq = LUNAR__RESERVE_RELEASE_REQUEST__INIT;
	uint64_t id = v->id;

	rq.late = late;
	rq.client_id = CLIENT_A;
	rq.ids = &id;
	rq.n_ids = 1;
	assert_int_equal(call_code(m, LUNAR__METHOD__RESERVE_RELEASE, &rq), 0);
}

/* client's Landed call: its writes into v below piece n are done. */
static void tell_landed(struct mst_master *m, uint64_t client, const struct resv *v, unsigned n)
{
	Lunar__LandedRequest rq = LUNAR__LANDED_REQUEST__INIT;
	Lunar__Landed l = LUNAR__LANDED__INIT, *lp = &l;

	l.reservation = v->id;
	l.below = v->off + n * (VALUE > v->align ? VALUE : v->align);
	rq.client_id = client;
	rq.landed = &lp;
	rq.n_landed = 1;
	assert_int_equal(call_code(m, LUNAR__METHOD__LANDED, &rq), 0);
}

static uint64_t used(struct mst_master *m)
{
	return LC_READ_ONCE(m->used);
}

static void test_master_beside_range_kept_until_reservation_ends(void **state)
{
	struct resv v;
	struct mst_master *m = master_reserved(&v);
	uint64_t before;

	(void)state;
	assert_int_equal(commit_call(m, CLIENT_A, &v, 0, "after", 0, 0), 0);
	assert_int_equal(commit_call(m, CLIENT_A, &v, 1, "beside", 1, 0), 0);
	assert_false(landing(m, "after"));
	assert_true(landing(m, "beside"));

	/* Committed after its write: its range is free once it goes. */
	before = used(m);
	assert_int_equal(remove_key(m, "after", 1), 0);
	assert_true(used(m) < before);

	/* Committed beside: its bytes may still land there. */
	before = used(m);
	assert_int_equal(remove_key(m, "beside", 1), 0);
	assert_int_equal(used(m), before);
	assert_int_equal(mst_resv_held_bytes(m), VALUE);
	assert_int_equal(exist(m, "default", "beside"), 0);

	/* Its writer says its writes are done: everything goes. */
	release_as(m, &v, 0);
	assert_int_equal(used(m), 0);
	assert_int_equal(mst_resv_held_bytes(m), 0);
	assert_int_equal(mst_deferred_bytes(m), 0);
	mst_master_destroy(m);
}

static void test_master_beside_landing_ends_with_reservation(void **state)
{
	struct resv v;
	struct mst_master *m = master_reserved(&v);

	(void)state;
	assert_int_equal(commit_call(m, CLIENT_A, &v, 0, "k", 1, 0), 0);
	assert_true(landing(m, "k"));
	release_as(m, &v, 0);
	assert_false(landing(m, "k"));
	/* Its range is the object's now: it goes when the object does. */
	assert_true(used(m) > 0);
	assert_int_equal(remove_key(m, "k", 1), 0);
	assert_int_equal(used(m), 0);
	mst_master_destroy(m);
}

static void test_master_beside_range_back_once_writer_says_landed(void **state)
{
	struct resv v;
	struct mst_master *m = master_reserved(&v);
	uint64_t before;

	(void)state;
	assert_int_equal(commit_call(m, CLIENT_A, &v, 0, "a", 1, 0), 0);
	assert_int_equal(commit_call(m, CLIENT_A, &v, 1, "b", 1, 0), 0);
	before = used(m);
	assert_int_equal(remove_key(m, "a", 1), 0);
	assert_int_equal(used(m), before);
	assert_int_equal(mst_resv_held_bytes(m), VALUE);
	/* Writes below a's end are done: a's range goes, b may still land. */
	tell_landed(m, CLIENT_A, &v, 1);
	assert_true(used(m) < before);
	assert_int_equal(mst_resv_held_bytes(m), 0);
	assert_true(landing(m, "b"));
	tell_landed(m, CLIENT_A, &v, 2);
	assert_false(landing(m, "b"));
	before = used(m);
	assert_int_equal(remove_key(m, "b", 1), 0);
	assert_true(used(m) < before);
	/* Another client's word is not A's. */
	assert_int_equal(commit_call(m, CLIENT_A, &v, 2, "c", 1, 0), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", 64 * MIB), 0);
	tell_landed(m, CLIENT_B, &v, 3);
	assert_true(landing(m, "c"));
	mst_master_destroy(m);
}

static void test_master_beside_late_end_keeps_range_until_writes_cannot_land(void **state)
{
	struct resv v;
	struct mst_master *m = master_reserved(&v);
	uint64_t before, deferred;

	(void)state;
	assert_int_equal(commit_call(m, CLIENT_A, &v, 0, "k", 1, 0), 0);
	/* A write into it may have failed part-way: it ends late. */
	release_as(m, &v, 1);
	assert_true(landing(m, "k"));
	before = used(m);
	deferred = mst_deferred_bytes(m);
	assert_int_equal(remove_key(m, "k", 1), 0);
	assert_int_equal(used(m), before);
	assert_true(mst_deferred_bytes(m) >= deferred + VALUE);
	mst_master_destroy(m);
}

static void test_master_beside_uncommit_takes_back_only_that_object(void **state)
{
	struct resv v;
	struct mst_master *m = master_reserved(&v);

	(void)state;
	assert_int_equal(mount(m, CLIENT_B, "seg-b", 64 * MIB), 0);
	assert_int_equal(commit_call(m, CLIENT_A, &v, 0, "k", 1, 0), 0);
	assert_int_equal(commit_call(m, CLIENT_A, &v, 1, "after", 0, 0), 0);
	/* another offset, another client, a key committed after its write */
	assert_int_equal(commit_call(m, CLIENT_A, &v, 2, "k", 0, 1), LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(commit_call(m, CLIENT_B, &v, 0, "k", 0, 1), LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(commit_call(m, CLIENT_A, &v, 1, "after", 0, 1), LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(exist(m, "default", "k"), 1);
	assert_int_equal(exist(m, "default", "after"), 1);

	assert_int_equal(commit_call(m, CLIENT_A, &v, 0, "k", 0, 1), 0);
	assert_int_equal(exist(m, "default", "k"), 0);
	assert_int_equal(commit_call(m, CLIENT_A, &v, 0, "k", 0, 1), LUNAR_ERR_OBJECT_NOT_FOUND);
	/* Its write failed part-way: its range goes back late, even once
	 * the reservation ends. */
	release_as(m, &v, 0);
	assert_true(mst_deferred_bytes(m) >= VALUE);
	mst_master_destroy(m);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_beside_range_kept_until_reservation_ends,
		test_master_beside_landing_ends_with_reservation,
		test_master_beside_range_back_once_writer_says_landed,
		test_master_beside_late_end_keeps_range_until_writes_cannot_land,
		test_master_beside_uncommit_takes_back_only_that_object)
