/*
 * test_master_settle.c - a new leader's wait for the proxies' reports
 * (mst_rebuild_settling) reads the segment count without the table's lock,
 * on every placement, while proxies mount and unmount their segments: it
 * keeps waiting inside the grace while no proxy has reported (it read the
 * count twice, and an unmount in between, 1 then 0, ended the wait), and
 * its reads race with no write of the count (which TSan, run on this test
 * by make tsan, would report: the count was a plain store under the write
 * lock).
 */
#include "test_master_util.h"

#include <stdatomic.h>

#include "atomic.h"
#include "clock.h"
#include "master/mst_int.h"
#include "tests/cmocka_main.h"

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

LUNAR_TEST_MAIN(NULL, NULL, test_master_settle_reads_count_beside_mounts)
