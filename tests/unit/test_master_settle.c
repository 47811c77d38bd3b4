/*
 * test_master_settle.c - a new leader's wait for the proxies' reports
 * (mst_rebuild_settling) reads the segment count without the table's lock,
 * on every placement, while proxies mount and unmount their segments: it
 * keeps waiting inside the grace while no proxy has reported (it read the
 * count twice, and an unmount in between, 1 then 0, ended the wait), and
 * its reads race with no write of the count (which TSan, run on this test
 * by make tsan, would report: the count was a plain store under the write
 * lock). Its grace runs from the latest new mount or report that rebuilt
 * something, up to --report-wait, and it counts each segment owner's last
 * batch once a lead, and waits for every client that called in the lead.
 */
#include "test_master_util.h"

#include <stdatomic.h>

#include "atomic.h"
#include "clock.h"
#include "master/mst_int.h"
#include "tests/cmocka_main.h"

#define CLIENT_C   0xc3 /* a third client */
#define MIN_ROUNDS 200	/* mounts and unmounts beside the reads */
#define MAX_MS	   1500 /* inside the grace, from 300 ms into the lead */

struct mounter {
	struct mst_master *m;
	atomic_int stop;
	atomic_uint rounds;
};

static void *mount_main(void *arg)
{
	struct mounter *t = arg;
	Lunar__UnmountSegmentRequest rq = LUNAR__UNMOUNT_SEGMENT_REQUEST__INIT;

	rq.client_id = CLIENT_A;
	rq.name = "seg-a";
	while (!atomic_load(&t->stop)) {
		assert_int_equal(mount(t->m, CLIENT_A, "seg-a", MIB), 0);
		assert_int_equal(call_code(t->m, LUNAR__METHOD__UNMOUNT_SEGMENT, &rq), 0);
		atomic_fetch_add(&t->rounds, 1);
	}
	return NULL;
}

static void test_master_settle_reads_count_beside_mounts(void **state)
{
	struct mounter t = {.m = master_new(NULL, NULL)};
	uint64_t end, reads = 0;
	pthread_t th;

	(void)state;
	/* led for 400 ms: past the first 300, so the count is read */
	LC_WRITE_ONCE(t.m->rebuild.lead_ms, lc_now_ms() - 400);
	end = lc_now_ms() + MAX_MS;
	assert_int_equal(pthread_create(&th, NULL, mount_main, &t), 0);
	while (lc_now_ms() < end && (atomic_load(&t.rounds) < MIN_ROUNDS || reads < 1000)) {
		assert_int_equal(mst_rebuild_settling(t.m), 1);
		reads++;
	}
	atomic_store(&t.stop, 1);
	assert_int_equal(pthread_join(th, NULL), 0);
	printf("# %llu reads beside %u mounts and unmounts\n", (unsigned long long)reads,
	       atomic_load(&t.rounds));
	assert_true(atomic_load(&t.rounds) > 0);
	mst_master_destroy(t.m);
}

/* A report's last batch (empty: a proxy with no objects) from client. */
static void report_last(struct mst_master *m, uint64_t client)
{
	Lunar__ReportObjectsRequest rq = LUNAR__REPORT_OBJECTS_REQUEST__INIT;

	rq.client_id = client;
	rq.last = 1;
	assert_int_equal(call_code(m, LUNAR__METHOD__REPORT_OBJECTS, &rq), 0);
}

/* A report of one 4 KiB object, key placed at off of seg (not the last
 * batch): the object's code. */
static int report_one(struct mst_master *m, uint64_t client, const char *seg, const char *key,
		      uint64_t off)
{
	Lunar__ReportObjectsRequest rq = LUNAR__REPORT_OBJECTS_REQUEST__INIT;
	Lunar__ReportedObject o = LUNAR__REPORTED_OBJECT__INIT, *op = &o;
	Lunar__Placement pl = LUNAR__PLACEMENT__INIT, *pp = &pl;
	Lunar__ReportObjectsReply *r;
	int code;

	pl.segment = (char *)seg;
	pl.offset = off;
	pl.length = 4096;
	o.key = (char *)key;
	o.size = 4096;
	o.version = 1;
	o.n_placements = 1;
	o.placements = &pp;
	rq.client_id = client;
	rq.n_objects = 1;
	rq.objects = &op;
	r = (Lunar__ReportObjectsReply *)call(m, LUNAR__METHOD__REPORT_OBJECTS, &rq);
	assert_int_equal(r->n_codes, 1);
	code = r->codes[0];
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return code;
}

/* Led for a little less than the grace, nothing heard since. */
static void lead_nearly_grace(struct mst_master *m)
{
	uint64_t lead = lc_now_ms() - (MST_REBUILD_GRACE_MS - 100);

	LC_WRITE_ONCE(m->rebuild.lead_ms, lead);
	LC_WRITE_ONCE(m->rebuild.heard_ms, lead);
}

/* The wait's grace runs from the latest new mount or report, not from the
 * start of the lead (before, it ended 3 s into the lead whatever came,
 * and a report of a million objects takes about that long), up to
 * --report-wait; it ends at once when every owner has reported. */
static void test_master_settle_grace_from_latest_heard(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);

	(void)state;
	LC_WRITE_ONCE(m->rebuild.lead_ms, lc_now_ms() - (MST_REBUILD_GRACE_MS - 100));
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	usleep(300 * 1000); /* 3.2 s into the lead, 0.3 s after the mount */
	assert_int_equal(mst_rebuild_settling(m), 1);
	/* quiet for the grace: it ends */
	LC_WRITE_ONCE(m->rebuild.heard_ms, lc_now_ms() - MST_REBUILD_GRACE_MS);
	assert_int_equal(mst_rebuild_settling(m), 0);
	/* heard again, but past the longest wait */
	LC_WRITE_ONCE(m->rebuild.lead_ms, lc_now_ms() - m->cfg.report_wait_ms);
	mst_rebuild_heard(m);
	assert_int_equal(mst_rebuild_settling(m), 0);
	/* a fresh lead: waits for seg-a's owner, until it reports */
	mst_rebuild_lead(m, lc_now_ms() - 400);
	assert_int_equal(mst_rebuild_settling(m), 1);
	report_last(m, CLIENT_A);
	assert_int_equal(mst_rebuild_settling(m), 0);
	mst_master_destroy(m);
}

/* --report-wait bounds the whole wait, however often reports rebuild
 * something: one of ten million objects takes longer than the 30 s
 * default. It is 1s..24h: 0 would place over ranges not reported yet. */
static void test_master_settle_report_wait_bounds_the_wait(void **state)
{
	struct mst_master *m = master_new("report-wait", "90s");
	uint64_t lead = lc_now_ms() - 60000;
	struct mst_config cfg;

	(void)state;
	mst_config_defaults(&cfg);
	assert_int_equal(mst_config_set(&cfg, "report-wait", "0"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "report-wait", "999ms"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(mst_config_set(&cfg, "report-wait", "25h"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(cfg.report_wait_ms, 30000);
	assert_int_equal(mst_config_set(&cfg, "report-wait", "1s"), 0);
	assert_int_equal(mst_config_set(&cfg, "report-wait", "24h"), 0);
	assert_int_equal(m->cfg.report_wait_ms, 90000);
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	LC_WRITE_ONCE(m->rebuild.lead_ms, lead);
	mst_rebuild_heard(m);			      /* a report rebuilt something just now */
	assert_int_equal(mst_rebuild_settling(m), 1); /* 60 s in: the default ended it */
	LC_WRITE_ONCE(m->rebuild.lead_ms, lc_now_ms() - 90000);
	assert_int_equal(mst_rebuild_settling(m), 0);
	mst_master_destroy(m);
	m = master_new("report-wait", "5s");
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	LC_WRITE_ONCE(m->rebuild.lead_ms, lc_now_ms() - 5000);
	mst_rebuild_heard(m);
	assert_int_equal(mst_rebuild_settling(m), 0);
	mst_master_destroy(m);
}

/* Only a report that rebuilt something restarts the grace: one sent again
 * (ranges taken, or on a segment gone with the old leader's node) every
 * beat, up to 20 times, held the leader off placing for 20 s. */
static void test_master_settle_grace_kept_only_by_rebuilds(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(report_one(m, CLIENT_A, "seg-a", "k0", 0), 0);
	/* refused: on a segment gone, or sent again (its range taken) */
	lead_nearly_grace(m);
	assert_int_not_equal(report_one(m, CLIENT_A, "seg-gone", "k1", 0), 0);
	assert_int_not_equal(report_one(m, CLIENT_A, "seg-a", "k0", 0), 0);
	usleep(200 * 1000);
	assert_int_equal(mst_rebuild_settling(m), 0);
	/* rebuilt: the wait goes on */
	lead_nearly_grace(m);
	assert_int_equal(report_one(m, CLIENT_A, "seg-a", "k2", 4096), 0);
	usleep(200 * 1000);
	assert_int_equal(mst_rebuild_settling(m), 1);
	mst_master_destroy(m);
}

/* The wait counts each segment owner's last batch once a lead, for each
 * of its segments: one sent again (its answer lost), or a writer's without
 * a segment, ended it while an owner had not reported; and an owner of two
 * segments kept it waiting for the grace. */
static void test_master_settle_counts_each_owner_once(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);
	uint64_t lead = lc_now_ms() - 400;

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b", MIB), 0);
	assert_int_equal(mount(m, CLIENT_B, "seg-b2", MIB), 0); /* counts for both */
	assert_true(mst_client_touch(m, CLIENT_C) >= 0);	/* a writer: no segment */
	LC_WRITE_ONCE(m->rebuild.lead_ms, lead);
	report_last(m, CLIENT_A);
	report_last(m, CLIENT_A);
	report_last(m, CLIENT_A);
	report_last(m, CLIENT_C);
	assert_int_equal(mst_rebuild_settling(m), 1);
	report_last(m, CLIENT_B);
	assert_int_equal(mst_rebuild_settling(m), 0);
	/* a new lead: each counts again */
	mst_rebuild_lead(m, lead - 1);
	report_last(m, CLIENT_A);
	assert_int_equal(mst_rebuild_settling(m), 1);
	report_last(m, CLIENT_B);
	assert_int_equal(mst_rebuild_settling(m), 0);
	mst_master_destroy(m);
}

/* A writer without a segment reports values that live in its peers'
 * segments: the wait holds for every client that called in the lead, not
 * only for the segment owners (it ended with the owners' last batches, and
 * a placement could then take a range the writer had yet to report). A
 * client that did not call in the lead is not waited for, and a last
 * batch sent again counts once. */
static void test_master_settle_waits_for_writers(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);
	uint64_t lead = lc_now_ms() - 400;

	(void)state;
	mst_rebuild_lead(m, lead);
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(ping(m, CLIENT_C), 1); /* a writer: no segment, new here */
	report_last(m, CLIENT_A);
	assert_int_equal(mst_rebuild_settling(m), 1);
	report_last(m, CLIENT_C);
	assert_int_equal(mst_rebuild_settling(m), 0);
	report_last(m, CLIENT_B); /* never called in this lead */
	report_last(m, CLIENT_C);
	assert_int_equal(LC_READ_ONCE(m->rebuild.clients_called), 2);
	assert_int_equal(LC_READ_ONCE(m->rebuild.clients_done), 2);
	assert_int_equal(mst_rebuild_settling(m), 0);
	/* the next lead: C called in the last one only, so its last batch
	 * does not stand for the writer B's */
	mst_rebuild_lead(m, lead - 1);
	assert_int_equal(ping(m, CLIENT_A), 0);
	assert_int_equal(ping(m, CLIENT_B), 1);
	report_last(m, CLIENT_C);
	report_last(m, CLIENT_A);
	assert_int_equal(mst_rebuild_settling(m), 1);
	report_last(m, CLIENT_B);
	assert_int_equal(mst_rebuild_settling(m), 0);
	mst_master_destroy(m);
}

/* A client that called in the lead and then expired without its last
 * batch is waited for no more; one that expired after it stays done. */
static void test_master_settle_drops_dead_callers(void **state)
{
	struct mst_master *m = master_new("client-ttl", "300ms");

	(void)state;
	mst_rebuild_lead(m, lc_now_ms() - 400);
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(ping(m, CLIENT_C), 1);
	assert_int_equal(ping(m, CLIENT_B), 1);
	report_last(m, CLIENT_B);
	report_last(m, CLIENT_A);
	assert_int_equal(mst_rebuild_settling(m), 1); /* C has not reported */
	/* A alive; B and C silent past the TTL */
	for (int i = 0; i < 2; i++) {
		usleep(200 * 1000);
		assert_int_equal(ping(m, CLIENT_A), 0);
	}
	mst_clients_expire(m); /* B's and C's, unless the housekeeper was first */
	assert_int_equal(mst_client_alive(m, CLIENT_C), 0);
	assert_int_equal(LC_READ_ONCE(m->rebuild.clients_called), 2);
	assert_int_equal(LC_READ_ONCE(m->rebuild.clients_done), 2);
	assert_int_equal(mst_rebuild_settling(m), 0);
	mst_master_destroy(m);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_settle_reads_count_beside_mounts,
		test_master_settle_grace_from_latest_heard,
		test_master_settle_grace_kept_only_by_rebuilds,
		test_master_settle_counts_each_owner_once,
		test_master_settle_report_wait_bounds_the_wait,
		test_master_settle_waits_for_writers, test_master_settle_drops_dead_callers)
