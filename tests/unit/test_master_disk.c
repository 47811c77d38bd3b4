/*
 * test_master_disk.c - the master's side of the disk tier: offload on_put
 * and on_evict (queued, busy, kept when the queue is full unless forced),
 * tasks handed out by Ping and re-queued when late, OffloadDone adding
 * LOCAL_DISK replicas (listed after MEMORY ones), DiskReplicasRemove and
 * DiskReplicasAdd, a dead proxy's disk replicas going with it (and no
 * queue made for one already dead), and the
 * forget records a Ping carries when an object with disk copies is removed
 * or replaced (never when the proxy itself dropped the copy).
 */
#include "test_master_util.h"

#include <stdatomic.h>

#include "clock.h"
#include "master/mst_int.h"
#include "tests/cmocka_main.h"

#define SEG_A "seg-a"

/* A DiskRecordsRequest call of one record (or none when key is NULL). */
static int disk_call(struct mst_master *m, uint32_t method, uint64_t client, const char *key,
		     uint64_t size, uint32_t crc, uint64_t location, int *code)
{
	Lunar__DiskRecordsRequest rq = LUNAR__DISK_RECORDS_REQUEST__INIT;
	Lunar__DiskRecord rec = LUNAR__DISK_RECORD__INIT, *recs[1] = {&rec};
	Lunar__BatchCodesReply *r;
	int st;

	rq.client_id = client;
	rec.tenant = "default";
	rec.key = (char *)key;
	rec.size = size;
	rec.crc32c = crc;
	rec.location = location;
	if (key) {
		rq.records = recs;
		rq.n_records = 1;
	}
	r = (Lunar__BatchCodesReply *)call(m, method, &rq);
	st = r->status->code;
	if (code)
		*code = r->n_codes ? r->codes[0] : 99;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return st;
}

/* Mount seg-a for A and register its (empty) disk tier. */
static void disk_proxy(struct mst_master *m)
{
	assert_int_equal(mount(m, CLIENT_A, SEG_A, 64 * MIB), 0);
	assert_int_equal(
	    disk_call(m, LUNAR__METHOD__DISK_REPLICAS_ADD, CLIENT_A, NULL, 0, 0, 0, NULL), 0);
}

static int put_crc(struct mst_master *m, const char *key, uint64_t size, uint32_t crc)
{
	Lunar__PutEndRequest rq = LUNAR__PUT_END_REQUEST__INIT;
	int code = put_start(m, CLIENT_A, key, size, 1);

	rq.client_id = CLIENT_A;
	rq.key = (char *)key;
	rq.crc32c = crc;
	return code ? code : call_code(m, LUNAR__METHOD__PUT_END, &rq);
}

/* Ping A; the number of offload tasks, the first one's key into key0. */
static size_t ping_tasks(struct mst_master *m, char *key0, size_t cap)
{
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	Lunar__PingReply *r;
	size_t n;

	rq.client_id = CLIENT_A;
	r = (Lunar__PingReply *)call(m, LUNAR__METHOD__PING, &rq);
	assert_int_equal(r->status->code, 0);
	n = r->n_offload;
	if (n && key0) {
		snprintf(key0, cap, "%s", r->offload[0]->key);
		assert_non_null(r->offload[0]->source);
		assert_int_equal(r->offload[0]->source->type, LUNAR__REPLICA_TYPE__MEMORY);
		assert_string_equal(r->offload[0]->source->segment, SEG_A);
	}
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return n;
}

/* The replica types of key, in order, as "MD" (MEMORY, LOCAL_DISK). */
static void replica_types(struct mst_master *m, const char *key, char *out)
{
	Lunar__GetReplicaListReply *r = get(m, key);

	assert_int_equal(r->status->code, 0);
	for (size_t i = 0; i < r->n_replicas; i++)
		out[i] = r->replicas[i]->type == LUNAR__REPLICA_TYPE__MEMORY ? 'M' : 'D';
	out[r->n_replicas] = 0;
	protobuf_c_message_free_unpacked(&r->base, NULL);
}

static uint64_t used_bytes(struct mst_master *m)
{
	struct mst_stats st;

	mst_master_stats(m, &st);
	return st.used_bytes;
}

static void test_master_disk_on_put_adds_local_disk(void **state)
{
	static const char *const flags[][2] = {{"offload", "on_put"}, {"kv-lease-ttl", "1ms"}};
	struct mst_master *m = master_with(flags, 2);
	char key[64], types[8];
	int code;

	/* Given: a proxy with a disk tier and a committed object */
	disk_proxy(m);
	assert_int_equal(put_crc(m, "k", 1000, 0x1234), 0);
	/* When: its Ping carries the task and it reports the copy */
	assert_int_equal(ping_tasks(m, key, sizeof(key)), 1);
	assert_string_equal(key, "k");
	assert_int_equal(ping_tasks(m, NULL, 0), 0); /* in flight: not sent twice */
	assert_int_equal(
	    disk_call(m, LUNAR__METHOD__OFFLOAD_DONE, CLIENT_A, "k", 1000, 0x1234, 77, &code), 0);
	assert_int_equal(code, 0);
	/* Then: MEMORY first, then LOCAL_DISK; eviction drops only MEMORY */
	replica_types(m, "k", types);
	assert_string_equal(types, "MD");
	usleep(5000);
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 60000), 1);
	replica_types(m, "k", types);
	assert_string_equal(types, "D");
	assert_int_equal(used_bytes(m), 0);
	assert_int_equal(exist(m, NULL, "k"), 1);
	mst_master_destroy(m);
}

static void test_master_disk_done_checks_value(void **state)
{
	static const char *const flags[][2] = {{"offload", "on_put"}};
	struct mst_master *m = master_with(flags, 1);
	int code;

	disk_proxy(m);
	assert_int_equal(put_crc(m, "k", 1000, 0x1234), 0);
	/* a copy of another value, or of a key that is gone, is refused */
	disk_call(m, LUNAR__METHOD__OFFLOAD_DONE, CLIENT_A, "k", 1000, 0x9999, 1, &code);
	assert_int_equal(code, LUNAR_ERR_CHECKSUM_MISMATCH);
	disk_call(m, LUNAR__METHOD__OFFLOAD_DONE, CLIENT_A, "gone", 1000, 0x1234, 1, &code);
	assert_int_equal(code, LUNAR_ERR_OBJECT_NOT_FOUND);
	/* a proxy the master does not know is refused whole */
	assert_int_equal(
	    disk_call(m, LUNAR__METHOD__OFFLOAD_DONE, 0x777, "k", 1000, 0x1234, 1, NULL),
	    LUNAR_ERR_ILLEGAL_CLIENT);
	mst_master_destroy(m);
}

static void test_master_disk_on_evict_keeps_until_on_disk(void **state)
{
	static const char *const flags[][2] = {
	    {"offload", "on_evict"}, {"kv-lease-ttl", "1ms"}, {"eviction-ratio", "1"}};
	struct mst_master *m = master_with(flags, 3);
	char key[64], types[8];
	int code;

	disk_proxy(m);
	assert_int_equal(put_crc(m, "k", 1000, 7), 0);
	usleep(5000);
	/* When: eviction picks it, it is queued and kept, and busy after */
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 60000), 0);
	assert_int_equal(exist(m, NULL, "k"), 1);
	usleep(5000);
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 60000), 0);
	assert_int_equal(ping_tasks(m, key, sizeof(key)), 1);
	/* Then: once the copy exists its MEMORY goes at once */
	disk_call(m, LUNAR__METHOD__OFFLOAD_DONE, CLIENT_A, "k", 1000, 7, 5, &code);
	assert_int_equal(code, 0);
	assert_int_equal(used_bytes(m), 0);
	replica_types(m, "k", types);
	assert_string_equal(types, "D");
	mst_master_destroy(m);
}

/* Two objects, queue of one: the second is kept, or evicted when forced. */
static void queue_full(int force)
{
	const char *const flags[][2] = {{"offload", "on_evict"},
					{"kv-lease-ttl", "1ms"},
					{"eviction-ratio", "1"},
					{"offload-queue", "1"},
					{"offload-force-evict", force ? "true" : "false"}};
	struct mst_master *m = master_with(flags, 5);

	disk_proxy(m);
	assert_int_equal(put_crc(m, "a", 1000, 1), 0);
	assert_int_equal(put_crc(m, "b", 1000, 2), 0);
	usleep(5000);
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 60000), force ? 1 : 0);
	assert_int_equal(exist(m, NULL, "a") + exist(m, NULL, "b"), force ? 1 : 2);
	assert_int_equal(ping_tasks(m, NULL, 0), 1);
	mst_master_destroy(m);
}

static void test_master_disk_queue_full_keeps(void **state)
{
	queue_full(0);
}

static void test_master_disk_queue_full_force_evicts(void **state)
{
	queue_full(1);
}

/* Memory full of objects waiting for (or refused) their disk copy: a put
 * waits for an offload to end, and when none does within
 * --offload-put-wait, the least recently used goes uncopied instead of
 * the put being refused. */
static void test_master_disk_put_waits_then_drops(void **state)
{
	static const char *const flags[][2] = {
	    {"offload", "on_evict"}, {"kv-lease-ttl", "1ms"}, {"offload-queue-bytes", "1"}};
	struct mst_master *m = master_with(flags, 3);
	char key[16];
	uint64_t t0;
	int left = 0;

	disk_proxy(m);
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "w%d", i);
		assert_int_equal(put_crc(m, key, 15 * MIB, (uint32_t)i + 1), 0);
	}
	usleep(5000);
	t0 = lc_now_ms();
	/* no room: one object is queued for its copy, the queue is full, and
	 * nobody pings to write it */
	assert_int_equal(put_crc(m, "w4", 15 * MIB, 9), 0);
	assert_true(lc_now_ms() - t0 >= 450); /* --offload-put-wait 500ms */
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "w%d", i);
		left += exist(m, NULL, key);
	}
	assert_int_equal(left, 3);
	assert_int_equal(m->ctr.offload_dropped, 1);
	assert_int_equal(ping_tasks(m, NULL, 0), 1); /* the queued one is still to copy */
	mst_master_destroy(m);
}

/* The proxy, 100 ms late: takes the queued task and reports its copy. */
static void *late_offload(void *arg)
{
	struct mst_master *m = arg;
	char key[16] = "";

	usleep(100000);
	if (ping_tasks(m, key, sizeof(key)) == 1)
		disk_call(m, LUNAR__METHOD__OFFLOAD_DONE, CLIENT_A, key, 15 * MIB,
			  (uint32_t)(key[1] - '0') + 1, 1, NULL);
	return NULL;
}

/* The same, but the copy is written during the wait: the put goes on at
 * once, and nothing goes uncopied. */
static void test_master_disk_put_waits_for_offload(void **state)
{
	static const char *const flags[][2] = {
	    {"offload", "on_evict"}, {"kv-lease-ttl", "1ms"}, {"offload-queue-bytes", "1"}};
	struct mst_master *m = master_with(flags, 3);
	pthread_t th;
	char key[16];
	uint64_t t0;
	int left = 0;

	disk_proxy(m);
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "w%d", i);
		assert_int_equal(put_crc(m, key, 15 * MIB, (uint32_t)i + 1), 0);
	}
	usleep(5000);
	t0 = lc_now_ms();
	assert_int_equal(pthread_create(&th, NULL, late_offload, m), 0);
	assert_int_equal(put_crc(m, "w4", 15 * MIB, 9), 0);
	pthread_join(th, NULL);
	assert_true(lc_now_ms() - t0 < 450);
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "w%d", i);
		left += exist(m, NULL, key);
	}
	assert_int_equal(left, 4); /* one of them on its disk copy */
	assert_int_equal(m->ctr.offload_dropped, 0);
	mst_master_destroy(m);
}

/* A status code of a call made off the test thread, where cmocka may not
 * assert: -1 when the dispatch itself failed. The reply into *rep if
 * asked, else freed. */
static int quiet_call(struct mst_master *m, uint32_t method, const void *req,
		      ProtobufCMessage **rep)
{
	ProtobufCMessage *r = NULL;
	int code;

	if (mst_dispatch(m, method, req, &r) || !r || !lp_status(r))
		code = -1;
	else
		code = lp_status(r)->code;
	if (rep && !code)
		*rep = r;
	else if (r)
		protobuf_c_message_free_unpacked(r, NULL);
	return code;
}

/* The proxy's side of a put's wait: it pings every 5 ms for a copy task,
 * leases the first object it copies (a reader during the copy), reports
 * each copy done, until two are or the put has ended. */
struct copier {
	struct mst_master *m;
	atomic_int put_done;
	int copies, codes; /* copies reported; calls that failed */
};

static void copy_one(struct copier *c, const char *key)
{
	Lunar__GetReplicaListRequest get = LUNAR__GET_REPLICA_LIST_REQUEST__INIT;
	Lunar__DiskRecordsRequest rq = LUNAR__DISK_RECORDS_REQUEST__INIT;
	Lunar__DiskRecord rec = LUNAR__DISK_RECORD__INIT, *recs[1] = {&rec};

	get.key = (char *)key;
	if (!c->copies)
		c->codes += quiet_call(c->m, LUNAR__METHOD__GET_REPLICA_LIST, &get, NULL) != 0;
	rq.client_id = CLIENT_A;
	rq.records = recs;
	rq.n_records = 1;
	rec.tenant = "default";
	rec.key = (char *)key;
	rec.size = 15 * MIB;
	rec.crc32c = (uint32_t)(key[1] - '0') + 1; /* put_crc's for "wN" */
	rec.location = 1;
	c->codes += quiet_call(c->m, LUNAR__METHOD__OFFLOAD_DONE, &rq, NULL) != 0;
	c->copies++;
}

static void *copier_main(void *arg)
{
	struct copier *c = arg;

	while (c->copies < 2 && !atomic_load(&c->put_done)) {
		Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
		ProtobufCMessage *rep = NULL;
		Lunar__PingReply *r;
		char key[16] = "";

		rq.client_id = CLIENT_A;
		if (quiet_call(c->m, LUNAR__METHOD__PING, &rq, &rep)) {
			c->codes++;
			break;
		}
		r = (Lunar__PingReply *)rep;
		if (r->n_offload)
			snprintf(key, sizeof(key), "%s", r->offload[0]->key);
		protobuf_c_message_free_unpacked(rep, NULL);
		if (key[0])
			copy_one(c, key);
		else
			usleep(5000);
	}
	return NULL;
}

/* A copy that ends without freeing memory (its object was read during the
 * copy) does not end the put's wait: it waits for the next copy, within
 * --offload-put-wait, and nothing goes uncopied. */
static void test_master_disk_put_waits_past_copy_of_read_object(void **state)
{
	/* leases of 100 ms: the copied object stays leased past its copy */
	static const char *const flags[][2] = {
	    {"offload", "on_evict"}, {"kv-lease-ttl", "100ms"}, {"offload-queue-bytes", "1"}};
	struct copier c = {.m = master_with(flags, 3)};
	pthread_t th;
	char key[16];
	uint64_t t0, took;
	int left = 0, rc;

	disk_proxy(c.m);
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "w%d", i);
		assert_int_equal(put_crc(c.m, key, 15 * MIB, (uint32_t)i + 1), 0);
	}
	usleep(5000);
	t0 = lc_now_ms();
	assert_int_equal(pthread_create(&th, NULL, copier_main, &c), 0);
	rc = put_crc(c.m, "w4", 15 * MIB, 9);
	took = lc_now_ms() - t0;
	atomic_store(&c.put_done, 1);
	pthread_join(th, NULL);
	assert_int_equal(rc, 0);
	assert_int_equal(c.codes, 0);
	assert_int_equal(c.copies, 2); /* the first freed nothing */
	assert_true(took < 450);       /* --offload-put-wait 500ms */
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "w%d", i);
		left += exist(c.m, NULL, key);
	}
	assert_int_equal(left, 4);
	assert_int_equal(c.m->ctr.offload_dropped, 0);
	mst_master_destroy(c.m);
}

static void test_master_disk_no_disk_tier_evicts(void **state)
{
	static const char *const flags[][2] = {
	    {"offload", "on_evict"}, {"kv-lease-ttl", "1ms"}, {"eviction-ratio", "1"}};
	struct mst_master *m = master_with(flags, 3);

	/* A's segment, but no disk tier registered: nothing to offload to */
	assert_int_equal(mount(m, CLIENT_A, SEG_A, 64 * MIB), 0);
	assert_int_equal(put_crc(m, "k", 1000, 7), 0);
	usleep(5000);
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 60000), 1);
	assert_int_equal(exist(m, NULL, "k"), 0);
	mst_master_destroy(m);
}

static void test_master_disk_failed_offload_evicts_later(void **state)
{
	static const char *const flags[][2] = {
	    {"offload", "on_evict"}, {"kv-lease-ttl", "1ms"}, {"eviction-ratio", "1"}};
	struct mst_master *m = master_with(flags, 3);
	int code;

	disk_proxy(m);
	assert_int_equal(put_crc(m, "k", 1000, 7), 0);
	usleep(5000);
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 60000), 0);
	assert_int_equal(ping_tasks(m, NULL, 0), 1);
	/* the proxy could not write it: it says so with DiskReplicasRemove */
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_REMOVE, CLIENT_A, "k", 1000, 7, 0, &code);
	assert_int_equal(code, 0);
	assert_int_equal(exist(m, NULL, "k"), 1);
	usleep(5000);
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 60000), 1);
	assert_int_equal(exist(m, NULL, "k"), 0);
	mst_master_destroy(m);
}

static void test_master_disk_task_requeued_when_late(void **state)
{
	static const char *const flags[][2] = {{"offload", "on_put"}};
	struct mst_master *m = master_with(flags, 1);
	Lunar__OffloadTask **v;
	size_t n;

	disk_proxy(m);
	assert_int_equal(put_crc(m, "k", 1000, 7), 0);
	assert_int_equal(ping_tasks(m, NULL, 0), 1);
	assert_int_equal(mst_offload_take(m, CLIENT_A, lc_now_ms() + 1000, &v, &n), 0);
	assert_int_equal(n, 0);
	free(v);
	assert_int_equal(
	    mst_offload_take(m, CLIENT_A, lc_now_ms() + MST_OFFLOAD_TIMEOUT_MS + 1000, &v, &n), 0);
	assert_int_equal(n, 1);
	protobuf_c_message_free_unpacked(&v[0]->base, NULL);
	free(v);
	mst_master_destroy(m);
}

static void test_master_disk_add_and_remove(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);
	char types[8];
	int code;

	disk_proxy(m);
	/* a record found at restart: the object comes back with only it */
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_ADD, CLIENT_A, "r", 500, 3, 9, &code);
	assert_int_equal(code, 0);
	replica_types(m, "r", types);
	assert_string_equal(types, "D");
	/* a record of another value than the master's is refused */
	assert_int_equal(put_crc(m, "k", 1000, 7), 0);
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_ADD, CLIENT_A, "k", 1000, 8, 9, &code);
	assert_int_equal(code, LUNAR_ERR_OBJECT_ALREADY_EXISTS);
	/* removing the only replica erases the object; another location is ignored */
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_REMOVE, CLIENT_A, "r", 500, 3, 10, &code);
	assert_int_equal(exist(m, NULL, "r"), 1);
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_REMOVE, CLIENT_A, "r", 500, 3, 9, &code);
	assert_int_equal(code, 0);
	assert_int_equal(exist(m, NULL, "r"), 0);
	mst_master_destroy(m);
}

static void test_master_disk_dead_proxy_drops_disk(void **state)
{
	static const char *const flags[][2] = {{"client-ttl", "200ms"}};
	struct mst_master *m = master_with(flags, 1);
	int code;

	disk_proxy(m);
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_ADD, CLIENT_A, "r", 500, 3, 9, &code);
	assert_int_equal(exist(m, NULL, "r"), 1);
	usleep(600 * 1000); /* A stops pinging; housekeeping declares it dead */
	assert_int_equal(exist(m, NULL, "r"), 0);
	mst_master_destroy(m);
}

/* A proxy's disk-tier queue is made only while it is alive: one made for a
 * client already declared dead (its late DiskReplicasAdd) would never be
 * dropped, and offload tasks queued to it would wait for nobody. */
static void test_master_disk_queue_only_for_live_client(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);

	(void)state;
	assert_int_equal(mst_offload_register(m, CLIENT_B), LUNAR_ERR_ILLEGAL_CLIENT);
	assert_null(m->offload.head);
	assert_true(mst_client_touch(m, CLIENT_B) >= 0);
	assert_int_equal(mst_offload_register(m, CLIENT_B), 0);
	assert_non_null(m->offload.head);
	mst_offload_drop_client(m, CLIENT_B);
	assert_null(m->offload.head);
	mst_master_destroy(m);
}

/* The offload tasks the last ping_forgets saw. */
static size_t forget_ping_tasks;

/* Ping A; the number of forget records, their keys joined by ',' and
 * locations summed into keys and loc (when not NULL). */
static size_t ping_forgets(struct mst_master *m, char *keys, size_t cap, uint64_t *loc)
{
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	Lunar__PingReply *r;
	size_t n, at = 0;

	rq.client_id = CLIENT_A;
	r = (Lunar__PingReply *)call(m, LUNAR__METHOD__PING, &rq);
	assert_int_equal(r->status->code, 0);
	n = r->n_forget;
	forget_ping_tasks = r->n_offload;
	if (keys)
		keys[0] = '\0';
	if (loc)
		*loc = 0;
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(r->forget[i]->tenant, "default");
		if (keys)
			at += (size_t)snprintf(keys + at, cap - at, "%s%s", i ? "," : "",
					       r->forget[i]->key);
		if (loc)
			*loc += r->forget[i]->location;
	}
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return n;
}

/* A committed object key (crc 7) with A's disk copy at location. */
static void on_disk(struct mst_master *m, const char *key, uint64_t location)
{
	int code;

	assert_int_equal(put_crc(m, key, 1000, 7), 0);
	disk_call(m, LUNAR__METHOD__OFFLOAD_DONE, CLIENT_A, key, 1000, 7, location, &code);
	assert_int_equal(code, 0);
}

static void test_master_disk_remove_forgets(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);
	char keys[64];
	uint64_t loc;

	/* Given: an object with a LOCAL_DISK replica on A, and one without */
	disk_proxy(m);
	on_disk(m, "k", 77);
	assert_int_equal(put_crc(m, "mem", 1000, 7), 0);
	assert_int_equal(ping_forgets(m, NULL, 0, NULL), 0);
	/* When: both are removed */
	assert_int_equal(remove_key(m, "k", 1), 0);
	assert_int_equal(remove_key(m, "mem", 1), 0);
	/* Then: A's next Ping tells it to delete its record, once */
	assert_int_equal(ping_forgets(m, keys, sizeof(keys), &loc), 1);
	assert_string_equal(keys, "k");
	assert_int_equal(loc, 77);
	assert_int_equal(ping_forgets(m, NULL, 0, NULL), 0);
	mst_master_destroy(m);
}

static void test_master_disk_batch_remove_forgets(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__BatchRemoveRequest rq = LUNAR__BATCH_REMOVE_REQUEST__INIT;
	char *v[] = {"a", "b"}, keys[64];
	Lunar__BatchCodesReply *r;
	uint64_t loc;

	disk_proxy(m);
	on_disk(m, "a", 1);
	on_disk(m, "b", 2);
	rq.keys = v;
	rq.n_keys = 2;
	rq.force = 1;
	r = (Lunar__BatchCodesReply *)call(m, LUNAR__METHOD__BATCH_REMOVE, &rq);
	assert_int_equal(r->status->code, 0);
	assert_int_equal(r->codes[0] + r->codes[1], 0);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	assert_int_equal(ping_forgets(m, keys, sizeof(keys), &loc), 2);
	assert_int_equal(loc, 3);
	mst_master_destroy(m);
}

static void test_master_disk_remove_all_and_regex_forget(void **state)
{
	static const char *const flags[][2] = {{"kv-lease-ttl", "1h"}};
	struct mst_master *m = master_with(flags, 1);
	char keys[64];
	uint64_t loc;

	disk_proxy(m);
	on_disk(m, "re/1", 10);
	on_disk(m, "re/2", 20);
	on_disk(m, "other", 100);
	assert_int_equal(exist(m, NULL, "re/1") + exist(m, NULL, "re/2"), 2); /* leased */
	/* a regex remove, forced past the leases, forgets only its matches */
	assert_int_equal(mst_obj_remove_regex(m, "default", "^re/", 1), 2);
	assert_int_equal(ping_forgets(m, keys, sizeof(keys), &loc), 2);
	assert_int_equal(loc, 30);
	/* a forced remove_all forgets the rest */
	assert_int_equal(remove_all(m, NULL, 1), 1);
	assert_int_equal(ping_forgets(m, keys, sizeof(keys), &loc), 1);
	assert_string_equal(keys, "other");
	assert_int_equal(loc, 100);
	mst_master_destroy(m);
}

static void test_master_disk_upsert_forgets(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;
	Lunar__PutEndRequest end = LUNAR__PUT_END_REQUEST__INIT;
	char types[8], keys[64];
	uint64_t loc;

	disk_proxy(m);
	on_disk(m, "k", 5);
	rq.client_id = end.client_id = CLIENT_A;
	rq.key = end.key = "k";
	rq.size = 2000;
	assert_int_equal(call_code(m, LUNAR__METHOD__UPSERT_START, &rq), 0);
	assert_int_equal(ping_forgets(m, NULL, 0, NULL), 0); /* not before the commit */
	end.crc32c = 8;
	assert_int_equal(call_code(m, LUNAR__METHOD__UPSERT_END, &end), 0);
	replica_types(m, "k", types);
	assert_string_equal(types, "M");
	assert_int_equal(ping_forgets(m, keys, sizeof(keys), &loc), 1);
	assert_int_equal(loc, 5);
	mst_master_destroy(m);
}

static void test_master_disk_proxy_remove_no_forget(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);
	int code;

	disk_proxy(m);
	/* the proxy drops its own copies: of an object kept, and of the last one */
	on_disk(m, "k", 5);
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_REMOVE, CLIENT_A, "k", 1000, 7, 5, &code);
	assert_int_equal(code, 0);
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_ADD, CLIENT_A, "r", 500, 3, 9, &code);
	disk_call(m, LUNAR__METHOD__DISK_REPLICAS_REMOVE, CLIENT_A, "r", 500, 3, 9, &code);
	assert_int_equal(code, 0);
	assert_int_equal(exist(m, NULL, "r"), 0);
	/* nothing to tell it; removing the object now has no disk copy to forget */
	assert_int_equal(ping_forgets(m, NULL, 0, NULL), 0);
	assert_int_equal(remove_key(m, "k", 1), 0);
	assert_int_equal(ping_forgets(m, NULL, 0, NULL), 0);
	mst_master_destroy(m);
}

static void test_master_disk_forget_queue_bounded(void **state)
{
	static const char *const flags[][2] = {{"offload", "on_put"}};
	struct mst_master *m = master_with(flags, 1);
	size_t total = 0, n;
	char key[32];
	uint64_t loc;

	disk_proxy(m);
	/* more forgets than the queue holds: the oldest go, the rest come in batches */
	for (unsigned i = 0; i < MST_FORGET_MAX + 3; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		disk_call(m, LUNAR__METHOD__DISK_REPLICAS_ADD, CLIENT_A, key, 10, 1, i, NULL);
		assert_int_equal(remove_key(m, key, 1), 0);
	}
	/* k0 put again: its offload task waits until every forget is out */
	assert_int_equal(put_crc(m, "k0", 10, 1), 0);
	assert_int_equal(ping_forgets(m, NULL, 0, &loc), MST_FORGET_BATCH);
	assert_int_equal(forget_ping_tasks, 0);
	/* the first batch starts at location 3: 0, 1 and 2 were dropped */
	assert_int_equal(loc, (uint64_t)MST_FORGET_BATCH * (MST_FORGET_BATCH - 1) / 2 +
				  3 * MST_FORGET_BATCH);
	total = MST_FORGET_BATCH;
	while ((n = ping_forgets(m, NULL, 0, NULL))) {
		total += n;
		assert_int_equal(forget_ping_tasks, total == MST_FORGET_MAX);
	}
	assert_int_equal(total, MST_FORGET_MAX);
	mst_master_destroy(m);
}

static void test_master_disk_flags(void **state)
{
	struct mst_config cfg;

	mst_config_defaults(&cfg);
	assert_int_equal(cfg.enable_offload, 0);
	assert_int_equal(cfg.offload_queue, 65536);
	assert_int_equal(cfg.offload_queue_bytes, 64ull << 20);
	assert_int_equal(mst_config_set(&cfg, "offload-queue-bytes", "1GiB"), 0);
	assert_int_equal(cfg.offload_queue_bytes, 1ull << 30);
	assert_int_equal(cfg.offload_put_wait_ms, 500);
	assert_int_equal(mst_config_set(&cfg, "offload", "sometimes"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "offload", "on_put"), 0);
	assert_int_equal(cfg.enable_offload, 1);
	assert_int_equal(cfg.offload, MST_OFFLOAD_ON_PUT);
	assert_int_equal(mst_config_set(&cfg, "offload-queue", "0"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_is_switch("enable-offload"), 1);
	assert_int_equal(mst_config_is_switch("offload-force-evict"), 1);
	assert_int_equal(mst_config_is_switch("offload"), 0);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_disk_on_put_adds_local_disk,
		test_master_disk_done_checks_value, test_master_disk_on_evict_keeps_until_on_disk,
		test_master_disk_queue_full_keeps, test_master_disk_queue_full_force_evicts,
		test_master_disk_put_waits_then_drops, test_master_disk_put_waits_for_offload,
		test_master_disk_put_waits_past_copy_of_read_object,
		test_master_disk_no_disk_tier_evicts, test_master_disk_failed_offload_evicts_later,
		test_master_disk_task_requeued_when_late, test_master_disk_add_and_remove,
		test_master_disk_dead_proxy_drops_disk, test_master_disk_queue_only_for_live_client,
		test_master_disk_remove_forgets, test_master_disk_batch_remove_forgets,
		test_master_disk_remove_all_and_regex_forget, test_master_disk_upsert_forgets,
		test_master_disk_proxy_remove_no_forget, test_master_disk_forget_queue_bounded,
		test_master_disk_flags)
