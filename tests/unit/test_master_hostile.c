/*
 * test_master_hostile.c - the master treats every request as untrusted: what
 * one peer sends cannot crash it, make it build replies or unpack requests
 * many times their size, or keep its locks busy (reproducers of a review).
 */
#include "test_master_util.h"

#include "http.h"
#include "master/master.h"
#include "http_gate.h"
#include "tests/cmocka_main.h"

/* Leave a non-NULL pattern on the stack, as earlier calls on a worker
 * thread would, so that a read of an unset local shows. */
static __attribute__((noinline)) void dirty_stack(void)
{
	volatile unsigned char junk[16384];

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = 0x41;
}

static void test_master_disk_batch_over_limit(void **state)
{
	/* Given: a disk-records call one record over the batch limit (it freed
	 * two pointers it had never set) */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__DiskRecordsRequest rq = LUNAR__DISK_RECORDS_REQUEST__INIT;
	Lunar__DiskRecord rec = LUNAR__DISK_RECORD__INIT;
	Lunar__DiskRecord **recs = calloc(LUNAR_BATCH_MAX + 1, sizeof(*recs));
	static const uint32_t methods[] = {LUNAR__METHOD__DISK_REPLICAS_ADD,
					   LUNAR__METHOD__DISK_REPLICAS_REMOVE,
					   LUNAR__METHOD__OFFLOAD_DONE};

	(void)state;
	assert_non_null(recs);
	rec.tenant = "default";
	rec.key = "k";
	rec.size = 1;
	for (size_t i = 0; i <= LUNAR_BATCH_MAX; i++)
		recs[i] = &rec;
	rq.client_id = CLIENT_A;
	rq.records = recs;
	rq.n_records = LUNAR_BATCH_MAX + 1;
	/* Then: each method refuses it */
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		dirty_stack();
		assert_int_equal(call_code(m, methods[i], &rq), LUNAR_ERR_INVALID_PARAMS);
	}
	free(recs);
	mst_master_destroy(m);
}

static int mount_named(struct mst_master *m, const char *name, const char *endpoint)
{
	Lunar__MountSegmentRequest rq = LUNAR__MOUNT_SEGMENT_REQUEST__INIT;
	Lunar__SegmentDesc d = LUNAR__SEGMENT_DESC__INIT;

	d.name = (char *)name;
	d.endpoint = (char *)endpoint;
	d.size = MIB;
	rq.client_id = CLIENT_A;
	rq.segment = &d;
	return call_code(m, LUNAR__METHOD__MOUNT_SEGMENT, &rq);
}

static void test_master_segment_names_bounded(void **state)
{
	/* A segment's name and endpoint go into every replica of every reply:
	 * a 1 MiB name made a 3 KiB request build a 512 MiB reply. */
	struct mst_master *m = master_new(NULL, NULL);
	char name[300];

	(void)state;
	memset(name, 'n', sizeof(name));
	name[255] = 0;
	assert_int_equal(mount_named(m, name, "127.0.0.1:1"), 0);
	name[255] = 'n';
	name[256] = 0;
	assert_int_equal(mount_named(m, name, "127.0.0.1:1"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mount_named(m, "seg-b", name), LUNAR_ERR_INVALID_PARAMS);
	mst_master_destroy(m);
}

static void test_master_preferred_segments_bounded(void **state)
{
	/* Each preferred name is looked up under the shard and segment locks:
	 * 4M of them held both for half a second. */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;
	char *prefs[65];

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	for (size_t i = 0; i < 65; i++)
		prefs[i] = "seg-a";
	rq.client_id = CLIENT_A;
	rq.key = "k";
	rq.size = 10;
	rq.preferred_segments = prefs;
	rq.n_preferred_segments = 65;
	assert_int_equal(call_code(m, LUNAR__METHOD__PUT_START, &rq), LUNAR_ERR_INVALID_PARAMS);
	rq.n_preferred_segments = 64;
	assert_int_equal(call_code(m, LUNAR__METHOD__PUT_START, &rq), 0);
	mst_master_destroy(m);
}

static void test_master_list_limit_bounded(void **state)
{
	/* A limit of 2^32 - 1 asked for 32 GiB of key pointers at once. */
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__ListKeysRequest rq = LUNAR__LIST_KEYS_REQUEST__INIT;
	Lunar__ListKeysReply *r;

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "k", 10, 1), 0);
	rq.limit = UINT32_MAX;
	r = (Lunar__ListKeysReply *)call(m, LUNAR__METHOD__LIST_KEYS, &rq);
	assert_int_equal(r->status->code, 0);
	assert_int_equal(r->n_keys, 1);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	mst_master_destroy(m);
}

static uint64_t tenants(struct mst_master *m)
{
	struct mst_stats st;

	mst_master_stats(m, &st);
	return st.tenants;
}

static int put_in(struct mst_master *m, const char *tenant, uint64_t size)
{
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;
	Lunar__PutEndRequest end = LUNAR__PUT_END_REQUEST__INIT;
	int rc;

	rq.client_id = end.client_id = CLIENT_A;
	rq.tenant = end.tenant = (char *)tenant;
	rq.key = end.key = "k";
	rq.size = size;
	rc = call_code(m, LUNAR__METHOD__PUT_START, &rq);
	return rc ? rc : call_code(m, LUNAR__METHOD__PUT_END, &end);
}

static void test_master_tenants_without_bytes_dropped(void **state)
{
	/* Every tenant name a put had named was kept for good, and each charge
	 * walks them all under one lock: 20000 made-up names, 20000 records. */
	const char *const flags[][2] = {{"default-tenant-quota", "1KiB"}};
	struct mst_master *m = master_with(flags, 1);
	char name[32];

	(void)state;
	/* When: puts refused for space (nothing mounted) name 2000 tenants */
	for (int i = 0; i < 2000; i++) {
		snprintf(name, sizeof(name), "made-up-%d", i);
		assert_int_equal(put_in(m, name, 10), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	}
	/* and one is refused by its quota */
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put_in(m, "over", 4096), LUNAR_ERR_TENANT_QUOTA_EXCEEDED);
	/* Then: none is kept; a tenant is kept while it stores bytes */
	assert_int_equal(tenants(m), 0);
	assert_int_equal(put_in(m, "real", 10), 0);
	assert_int_equal(tenants(m), 1);
	assert_int_equal(remove_all(m, "real", 1), 1);
	assert_int_equal(tenants(m), 0);
	mst_master_destroy(m);
}

/* A request's bytes with the framing header, packed from req. */
static uint8_t *framed(uint32_t method, const ProtobufCMessage *req, size_t *len)
{
	void *buf;

	assert_int_equal(lp_request_pack(method, req, &buf, len), 0);
	return buf;
}

static void test_master_unpack_bounded(void **state)
{
	/* Given: the largest legitimate request: 1024 puts with 4 KiB keys,
	 * each naming 8 preferred segments of 255 bytes */
	Lunar__BatchPutStartRequest big = LUNAR__BATCH_PUT_START_REQUEST__INIT;
	Lunar__PutStartRequest *items = calloc(LUNAR_BATCH_MAX, sizeof(*items));
	Lunar__PutStartRequest **ptrs = calloc(LUNAR_BATCH_MAX, sizeof(*ptrs));
	Lunar__BatchKeysRequest keys = LUNAR__BATCH_KEYS_REQUEST__INIT;
	char key[LUNAR_KEY_MAX + 1], seg[256], *prefs[8];
	const struct lp_method *mt;
	ProtobufCMessage *req;
	size_t len, n;
	uint8_t *b;

	(void)state;
	assert_non_null(items);
	assert_non_null(ptrs);
	memset(key, 'k', LUNAR_KEY_MAX);
	key[LUNAR_KEY_MAX] = 0;
	memset(seg, 's', 255);
	seg[255] = 0;
	for (size_t i = 0; i < 8; i++)
		prefs[i] = seg;
	for (size_t i = 0; i < LUNAR_BATCH_MAX; i++) {
		lunar__put_start_request__init(&items[i]);
		items[i].key = key;
		items[i].size = 1;
		items[i].preferred_segments = prefs;
		items[i].n_preferred_segments = 8;
		ptrs[i] = &items[i];
	}
	big.items = ptrs;
	big.n_items = LUNAR_BATCH_MAX;
	/* Then: it unpacks */
	b = framed(LUNAR__METHOD__BATCH_PUT_START, &big.base, &len);
	assert_int_equal(lp_request_unpack(b, len, &mt, &req), 0);
	assert_int_equal(((Lunar__BatchPutStartRequest *)req)->n_items, LUNAR_BATCH_MAX);
	protobuf_c_message_free_unpacked(req, NULL);
	free(b);
	free(ptrs);
	free(items);
	/* When: 32 MiB of empty keys, two bytes each packed (a pointer and an
	 * allocation each unpacked: ~700 MiB) */
	n = (32u << 20) / 2;
	keys.keys = calloc(n, sizeof(*keys.keys));
	assert_non_null(keys.keys);
	for (size_t i = 0; i < n; i++)
		keys.keys[i] = "";
	keys.n_keys = n;
	b = framed(LUNAR__METHOD__BATCH_EXIST_KEY, &keys.base, &len);
	/* Then: refused before it takes more than its budget */
	assert_int_equal(lp_request_unpack(b, len, &mt, &req), LUNAR_ERR_PROTOCOL);
	free(b);
	free(keys.keys);
}

static void test_master_reply_unpack_bounded(void **state)
{
	/* Given: the largest legitimate reply: replica lists of 1024 keys, 64
	 * replicas each, with 255-byte segment names and endpoints */
	const struct lp_method *mt = lp_method_find(LUNAR__METHOD__BATCH_GET_REPLICA_LIST);
	Lunar__BatchGetReplicaListReply big = LUNAR__BATCH_GET_REPLICA_LIST_REPLY__INIT;
	Lunar__GetReplicaListResult res = LUNAR__GET_REPLICA_LIST_RESULT__INIT, *results[1024];
	Lunar__Replica rep = LUNAR__REPLICA__INIT, *reps[64];
	Lunar__Status st = LUNAR__STATUS__INIT;
	char name[256];
	ProtobufCMessage *got;
	size_t len;
	uint8_t *b;

	(void)state;
	memset(name, 'n', 255);
	name[255] = 0;
	rep.segment = rep.endpoint = name;
	for (size_t i = 0; i < 64; i++)
		reps[i] = &rep;
	res.replicas = reps;
	res.n_replicas = 64;
	for (size_t i = 0; i < 1024; i++)
		results[i] = &res;
	big.status = &st;
	big.results = results;
	big.n_results = 1024;
	len = protobuf_c_message_get_packed_size(&big.base);
	b = malloc(len);
	assert_non_null(b);
	protobuf_c_message_pack(&big.base, b);
	/* Then: it unpacks */
	got = lp_reply_unpack(mt, b, len);
	assert_non_null(got);
	assert_int_equal(((Lunar__BatchGetReplicaListReply *)got)->n_results, 1024);
	protobuf_c_message_free_unpacked(got, NULL);
	free(b);
	/* When: 64 MiB of empty results, two bytes each packed (a struct and an
	 * allocation each unpacked: ~2 GiB) */
	len = LP_MAX_MSG;
	b = malloc(len);
	assert_non_null(b);
	for (size_t i = 0; i < len; i += 2) {
		b[i] = (2 << 3) | 2; /* results = 2, length-delimited */
		b[i + 1] = 0;
	}
	/* Then: refused before it takes more than its budget */
	assert_null(lp_reply_unpack(mt, b, len));
	free(b);
}

/* The HTTP status of GET /admin/keys?query on m. */
static int admin_keys_status(struct mst_master *m, const char *query)
{
	struct lc_http_reply rep = {.status = 200};
	struct auth_http_gate gate;
	struct mst_http mh = {.m = m, .gate = &gate};
	struct lc_http_req req = {
	    .method = "GET", .path = "/admin/keys", .query = query, .peer_loopback = 1};

	auth_http_gate_init(&gate, NULL, "test");
	assert_int_equal(mst_http_handle(&mh, &req, &rep), 0);
	free(rep.body);
	return rep.status;
}

static void test_master_admin_keys_refuses_bad_queries(void **state)
{
	/* A malformed tenant read as "" listed every tenant's keys, and
	 * "{,n}" slipped past the pattern's cost check (5.9 s on one key, the
	 * shard and the HTTP handler held) */
	struct mst_master *m = master_new(NULL, NULL);

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put_in(m, "real", 10), 0);
	assert_int_equal(admin_keys_status(m, "tenant=real"), 200);
	assert_int_equal(admin_keys_status(m, "tenant=%zz"), 400);
	assert_int_equal(admin_keys_status(m, "tenant=%00"), 400);
	assert_int_equal(admin_keys_status(m, "tenant=real&pattern=%zz"), 400);
	assert_int_equal(admin_keys_status(m, "pattern=(a%7B,64%7D)%7B,64%7Dx"), 400);
	mst_master_destroy(m);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_disk_batch_over_limit, test_master_segment_names_bounded,
		test_master_preferred_segments_bounded, test_master_list_limit_bounded,
		test_master_tenants_without_bytes_dropped, test_master_unpack_bounded,
		test_master_reply_unpack_bounded, test_master_admin_keys_refuses_bad_queries)
