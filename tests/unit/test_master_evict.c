/*
 * test_master_evict.c - memory eviction: which objects a round picks (the
 * oldest lease deadlines, never leased, PROCESSING or hard-pinned ones,
 * soft-pinned ones last), a census kept for later rounds (which pass over
 * what was used since, and never take what a lease that ran out since could
 * undercut), the background trigger at the watermark, when a put may wait
 * for a round (mst_put_may_wait), filling a store far
 * beyond its capacity, no eviction for a value no segment could hold, and
 * remove_all racing writers.
 */
#include "test_master_util.h"

#include "atomic.h"
#include "clock.h"
#include "master/mst_int.h"
#include "master/mst_obj.h"
#include "tests/cmocka_main.h"

/* PutStart + PutEnd with pins. */
static int put_pinned(struct mst_master *m, const char *key, int hard, int soft)
{
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;
	int code;

	rq.client_id = CLIENT_A;
	rq.key = (char *)key;
	rq.size = 1000;
	rq.hard_pin = hard;
	rq.soft_pin = soft;
	code = call_code(m, LUNAR__METHOD__PUT_START, &rq);
	return code ? code : put_finish(m, CLIENT_A, key, 1);
}

static void key_of(char *buf, size_t n, const char *prefix, int i)
{
	snprintf(buf, n, "%s%03d", prefix, i);
}

/* Commit n objects of size bytes as CLIENT_A, keys prefix000, prefix001... */
static void put_many(struct mst_master *m, const char *prefix, int n, uint64_t size)
{
	char key[16];

	for (int i = 0; i < n; i++) {
		key_of(key, sizeof(key), prefix, i);
		assert_int_equal(put(m, CLIENT_A, key, size, 1), 0);
	}
}

static void test_master_evict_oldest_share(void **state)
{
	/* Given: 400 COMPLETE objects; 20 of them read first (older leases),
	 * the rest read later; eviction ratio 0.05 */
	static const char *const flags[][2] = {{"kv-lease-ttl", "1s"}, {"eviction-ratio", "0.05"}};
	struct mst_master *m = master_with(flags, 2);
	struct mst_stats st;
	char key[16];

	assert_int_equal(mount(m, CLIENT_A, "seg-a", 64 * MIB), 0);
	put_many(m, "o", 400, 1000);
	for (int i = 0; i < 20; i++) {
		key_of(key, sizeof(key), "o", i);
		assert_int_equal(exist(m, NULL, key), 1);
	}
	usleep(5000);
	for (int i = 20; i < 400; i++) {
		key_of(key, sizeof(key), "o", i);
		assert_int_equal(exist(m, NULL, key), 1);
	}
	/* When: one round runs after every lease has expired */
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 60000), 20);
	/* Then: exactly the 20 oldest are gone */
	for (int i = 0; i < 400; i++) {
		key_of(key, sizeof(key), "o", i);
		assert_int_equal(exist(m, NULL, key), i >= 20);
	}
	mst_master_stats(m, &st);
	assert_int_equal(st.keys, 380);
	assert_int_equal(st.used_bytes, 380 * 1024);
	mst_master_destroy(m);
}

static void test_master_evict_never_protected(void **state)
{
	/* Given: eviction ratio 1, a leased, a PROCESSING, a hard-pinned and a
	 * plain object */
	static const char *const flags[][2] = {{"eviction-ratio", "1"}, {"kv-lease-ttl", "1h"}};
	struct mst_master *m = master_with(flags, 2);
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "leased", 100, 1), 0);
	assert_int_equal(exist(m, NULL, "leased"), 1);
	assert_int_equal(put_start(m, CLIENT_A, "proc", 100, 1), 0);
	assert_int_equal(put_pinned(m, "hard", 1, 0), 0);
	assert_int_equal(put(m, CLIENT_A, "plain", 100, 1), 0);
	/* When: rounds run */
	for (int i = 0; i < 3; i++)
		mst_evict_round(m, lc_now_ms() + 1);
	/* Then: only the plain one went */
	assert_int_equal(get_code(m, "plain"), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_code(m, "proc"), LUNAR_ERR_REPLICA_IS_NOT_READY);
	assert_int_equal(exist(m, NULL, "leased"), 1);
	/* and the hard pin holds even long after every lease */
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 7200 * 1000), 1);
	assert_int_equal(exist(m, NULL, "hard"), 1);
	assert_int_equal(exist(m, NULL, "leased"), 0);
	assert_int_equal(put_finish(m, CLIENT_A, "proc", 1), 0);
	mst_master_stats(m, &st);
	assert_int_equal(st.keys, 2);
	mst_master_destroy(m);
}

static void test_master_evict_put_again_counts_as_use(void **state)
{
	/* Given: 40 objects committed one after another, then the 10 oldest
	 * put again (the bytes were made again: OBJECT_ALREADY_EXISTS) */
	const char *const flags[][2] = {{"eviction-ratio", "0.25"}, {"kv-lease-ttl", "0ms"}};
	struct mst_master *m = master_with(flags, 2);
	char key[16];

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	for (int i = 0; i < 40; i++) {
		key_of(key, sizeof(key), "p", i);
		assert_int_equal(put(m, CLIENT_A, key, 1000, 1), 0);
		if (i == 9 || i == 19)
			usleep(3000);
	}
	usleep(3000);
	for (int i = 0; i < 10; i++) {
		key_of(key, sizeof(key), "p", i);
		assert_int_equal(put(m, CLIENT_A, key, 1000, 1), LUNAR_ERR_OBJECT_ALREADY_EXISTS);
	}
	/* When: a round evicts a quarter; Then: the next oldest go, not those */
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 1000), 10);
	for (int i = 0; i < 40; i++) {
		key_of(key, sizeof(key), "p", i);
		assert_int_equal(exist(m, NULL, key), i < 10 || i >= 20);
	}
	mst_master_destroy(m);
}

/* Commit s000..s009 soft-pinned, then, a few ms later, u000..u009 unpinned. */
static void put_pinned_then_plain(struct mst_master *m)
{
	char key[16];

	for (int i = 0; i < 10; i++) {
		key_of(key, sizeof(key), "s", i);
		assert_int_equal(put_pinned(m, key, 0, 1), 0);
	}
	usleep(5000);
	put_many(m, "u", 10, 1000);
}

static void soft_pin_scenario(int allow)
{
	/* Given: 10 soft-pinned objects with the oldest leases, 10 unpinned
	 * newer ones, eviction ratio 0.5 */
	const char *const flags[][2] = {{"eviction-ratio", "0.5"},
					{"kv-lease-ttl", "0ms"},
					{"allow-evict-soft-pinned", allow ? "true" : "false"}};
	struct mst_master *m = master_with(flags, 3);
	uint64_t later;
	char key[16];

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	put_pinned_then_plain(m);
	later = lc_now_ms() + 1000;
	/* When: a round runs; Then: the 10 unpinned go first, not the older pinned */
	assert_int_equal(mst_evict_round(m, later), allow ? 10 : 5);
	for (int i = 0; i < 10; i++) {
		key_of(key, sizeof(key), "s", i);
		assert_int_equal(exist(m, NULL, key), 1);
	}
	/* When: unpinned candidates have run out; Then: soft-pinned go only if allowed */
	while (mst_evict_round(m, later) > 0)
		;
	for (int i = 0; i < 10; i++) {
		key_of(key, sizeof(key), "s", i);
		assert_int_equal(exist(m, NULL, key), !allow);
		key_of(key, sizeof(key), "u", i);
		assert_int_equal(exist(m, NULL, key), 0);
	}
	mst_master_destroy(m);
}

static void test_master_evict_soft_pinned_last(void **state)
{
	soft_pin_scenario(1);
}

static void test_master_evict_soft_pinned_kept(void **state)
{
	soft_pin_scenario(0);
}

static void test_master_evict_soft_pin_expires(void **state)
{
	/* Given: a soft pin of 50ms, capped by max 100ms (asked: 1h) */
	static const char *const flags[][2] = {{"kv-soft-pin-ttl", "50ms"},
					       {"max-kv-soft-pin-ttl", "100ms"},
					       {"eviction-ratio", "1"},
					       {"allow-evict-soft-pinned", "false"}};
	struct mst_master *m = master_with(flags, 4);
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put_pinned(m, "dflt", 0, 1), 0);
	rq.client_id = CLIENT_A;
	rq.key = "long";
	rq.size = 10;
	rq.soft_pin = 1;
	rq.soft_pin_ttl_ms = 3600 * 1000;
	assert_int_equal(call_code(m, LUNAR__METHOD__PUT_START, &rq), 0);
	assert_int_equal(put_finish(m, CLIENT_A, "long", 1), 0);
	/* When/Then: pinned at first, evictable when the TTL (from commit) ends */
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 1), 0);
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 75), 1);
	assert_int_equal(mst_evict_round(m, lc_now_ms() + 150), 1);
	mst_master_destroy(m);
}

/* Commit 40 objects in 4 groups of 10, each group used after the one before. */
static void put_four_groups(struct mst_master *m)
{
	char key[16];

	for (int i = 0; i < 40; i++) {
		key_of(key, sizeof(key), "g", i);
		assert_int_equal(put(m, CLIENT_A, key, 1000, 1), 0);
		if (i % 10 == 9)
			usleep(3000);
	}
}

/* Whether key is stored, without using it (a get would count as a use). */
static int stored(struct mst_master *m, const char *key)
{
	struct mst_shard *s;
	struct mst_object **pp;
	int found;

	assert_int_equal(mst_obj_lookup(m, NULL, key, &s, &pp), 0);
	found = *pp != NULL;
	pthread_mutex_unlock(&s->lock);
	return found;
}

static uint64_t censuses(struct mst_master *m)
{
	return LC_READ_ONCE(m->ctr.evict_censuses);
}

static void test_master_evict_census_serves_later_rounds(void **state)
{
	/* Given: 40 objects in 4 groups by age; eviction ratio 0.25 */
	const char *const flags[][2] = {{"eviction-ratio", "0.25"}, {"kv-lease-ttl", "0ms"}};
	struct mst_master *m = master_with(flags, 2);
	uint64_t later, before;

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	put_four_groups(m);
	later = lc_now_ms() + 10;
	before = censuses(m);
	/* When: four rounds run; Then: each takes the oldest group left, and
	 * only the first counts every object */
	for (int r = 1; r <= 4; r++) {
		assert_int_equal(mst_evict_round(m, later), 10);
		assert_int_equal(censuses(m), before + 1);
		for (int i = 10 * (r - 1); i < 40; i += 9) {
			char key[16];

			key_of(key, sizeof(key), "g", i);
			assert_int_equal(stored(m, key), i >= 10 * r);
		}
	}
	/* And: with the kept candidates gone the next round counts again */
	assert_int_equal(mst_evict_round(m, later), 0);
	assert_int_equal(censuses(m), before + 2);
	mst_master_destroy(m);
}

static void test_master_evict_kept_census_passes_over_used(void **state)
{
	/* Given: 40 objects in 4 groups by age; a round took the oldest */
	const char *const flags[][2] = {{"eviction-ratio", "0.25"}, {"kv-lease-ttl", "0ms"}};
	struct mst_master *m = master_with(flags, 2);
	uint64_t later;
	char key[16];

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	put_four_groups(m);
	later = lc_now_ms() + 100;
	assert_int_equal(mst_evict_round(m, later), 10);
	/* When: the second group is read, then a round runs on the kept census */
	usleep(3000);
	for (int i = 10; i < 20; i++) {
		key_of(key, sizeof(key), "g", i);
		assert_int_equal(exist(m, NULL, key), 1);
	}
	assert_int_equal(mst_evict_round(m, later), 10);
	/* Then: the third group went in its place */
	for (int i = 0; i < 40; i++) {
		key_of(key, sizeof(key), "g", i);
		assert_int_equal(exist(m, NULL, key), (i >= 10 && i < 20) || i >= 30);
	}
	mst_master_destroy(m);
}

static void test_master_evict_kept_census_not_undercut(void **state)
{
	/* Given: leases of 300 ms; "x" read (leased, so no candidate), then 4
	 * newer objects, the oldest of which a round (ratio 0.25) took */
	const char *const flags[][2] = {{"eviction-ratio", "0.25"}, {"kv-lease-ttl", "300ms"}};
	struct mst_master *m = master_with(flags, 2);
	char key[16];
	int left = 0;

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_int_equal(put(m, CLIENT_A, "x", 1000, 1), 0);
	assert_int_equal(exist(m, NULL, "x"), 1);
	usleep(5000);
	for (int i = 0; i < 4; i++) {
		key_of(key, sizeof(key), "y", i);
		assert_int_equal(put(m, CLIENT_A, key, 1000, 1), 0);
	}
	assert_int_equal(mst_evict_round(m, lc_now_ms()), 1);
	/* When: x's lease runs out, and a round runs well within a second */
	usleep(400 * 1000);
	assert_int_equal(mst_evict_round(m, lc_now_ms()), 1);
	/* Then: x went, the least recently used, not one the census kept */
	assert_int_equal(exist(m, NULL, "x"), 0);
	for (int i = 0; i < 4; i++) {
		key_of(key, sizeof(key), "y", i);
		left += exist(m, NULL, key);
	}
	assert_int_equal(left, 3);
	mst_master_destroy(m);
}

static void test_master_evict_kept_census_spares_soft_pins(void **state)
{
	/* Given: 10 soft-pinned objects, then 10 newer unpinned ones; a round
	 * (ratio 0.25, soft-pinned ones allowed last) took 5 unpinned */
	const char *const flags[][2] = {{"eviction-ratio", "0.25"},
					{"kv-lease-ttl", "0ms"},
					{"allow-evict-soft-pinned", "true"}};
	struct mst_master *m = master_with(flags, 3);
	uint64_t later;
	char key[16];
	int unpinned = 0;

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	put_pinned_then_plain(m);
	later = lc_now_ms() + 10;
	assert_int_equal(mst_evict_round(m, later), 5);
	/* When: the 5 unpinned left are read, and a round runs */
	usleep(3000);
	for (int i = 0; i < 10; i++) {
		key_of(key, sizeof(key), "u", i);
		if (stored(m, key))
			assert_int_equal(exist(m, NULL, key), 1);
	}
	assert_true(mst_evict_round(m, later) > 0);
	/* Then: unpinned ones went, recently read or not, before any pinned */
	for (int i = 0; i < 10; i++) {
		key_of(key, sizeof(key), "s", i);
		assert_true(stored(m, key));
		key_of(key, sizeof(key), "u", i);
		unpinned += stored(m, key);
	}
	assert_true(unpinned < 5);
	mst_master_destroy(m);
}

static void test_master_evict_watermark_background(void **state)
{
	/* Given: a 1 MiB store, watermark 0.5 */
	static const char *const flags[][2] = {{"eviction-high-watermark-ratio", "0.5"}};
	struct mst_master *m = master_with(flags, 1);
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	/* When: 80% is filled with unread objects */
	put_many(m, "w", 80, 10 * 1024);
	/* Then: housekeeping brings use back under the watermark */
	usleep(400 * 1000);
	mst_master_stats(m, &st);
	assert_true(st.used_bytes <= MIB / 2);
	assert_true(st.keys > 0);
	mst_master_destroy(m);
}

static void test_master_evict_put_may_wait(void **state)
{
	/* Given: a 1 MiB store, watermark 0.5, 1000 KiB of hard-pinned objects
	 * (ranges of 1 KiB), which no background round can evict */
	static const char *const flags[][2] = {{"eviction-high-watermark-ratio", "0.5"}};
	struct mst_master *m = master_with(flags, 1);
	char key[16];

	assert_int_equal(mount(m, CLIENT_A, "seg-a", MIB), 0);
	assert_false(mst_put_may_wait(m, MIB));
	assert_true(mst_put_may_wait(m, MIB + 1));
	for (int i = 0; i < 1000; i++) {
		key_of(key, sizeof(key), "p", i);
		assert_int_equal(put_pinned(m, key, 1, 0), 0);
	}
	/* Then: a put may wait for a round exactly when it no longer fits (not
	 * merely past the watermark), or while an allocation failure awaits
	 * its round */
	assert_false(mst_put_may_wait(m, 24 * 1024));
	assert_true(mst_put_may_wait(m, 24 * 1024 + 1));
	LC_WRITE_ONCE(m->alloc_failed, 1);
	assert_true(mst_put_may_wait(m, 1));
	mst_evict_round(m, lc_now_ms());
	assert_false(mst_put_may_wait(m, 1));
	mst_master_destroy(m);
}

static void test_master_evict_fill_beyond_capacity(void **state)
{
	/* Given: a 4 MiB store */
	struct mst_master *m = master_new(NULL, NULL);
	struct mst_stats st;
	int busy = 0;
	char key[16];

	assert_int_equal(mount(m, CLIENT_A, "seg-a", 4 * MIB), 0);
	/* When: 64 MiB of unread 64 KiB objects are put */
	for (int i = 0; i < 1024; i++) {
		int code;

		key_of(key, sizeof(key), "f", i);
		while ((code = put(m, CLIENT_A, key, 64 * 1024, 1)) ==
		       LUNAR_ERR_NO_AVAILABLE_HANDLE) {
			assert_true(++busy < 20);
			usleep(1000);
		}
		assert_int_equal(code, 0);
	}
	/* Then: every put succeeded (at most a few brief back-pressures) and
	 * the newest object is still there */
	assert_true(busy < 20);
	assert_int_equal(exist(m, NULL, "f1023"), 1);
	mst_master_stats(m, &st);
	assert_true(st.used_bytes <= 4 * MIB);
	assert_true(st.keys >= 32);
	mst_master_destroy(m);
}

static void test_master_evict_not_for_what_cannot_fit(void **state)
{
	/* Given: a 4 MiB store holding 100 objects whose leases have expired */
	static const char *const flags[][2] = {{"kv-lease-ttl", "1ms"}};
	struct mst_master *m = master_with(flags, 1);
	struct mst_stats st;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", 4 * MIB), 0);
	put_many(m, "k", 100, 1000);
	usleep(5000);
	/* When: puts larger than every segment are asked for, again and again */
	for (int i = 0; i < 50; i++)
		assert_int_equal(put(m, CLIENT_A, "huge", 5 * MIB, 1),
				 LUNAR_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(put(m, CLIENT_A, "huge", 1ull << 40, 1), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	/* Then: they are refused and nothing was evicted to make room */
	mst_master_stats(m, &st);
	assert_int_equal(st.keys, 100);
	assert_int_equal(exist(m, NULL, "k000"), 1);
	mst_master_destroy(m);
}

struct writer_arg {
	struct mst_master *m;
	int id, ok;
};

static void *writer(void *p)
{
	struct writer_arg *a = p;
	char key[32];

	for (int i = 0; i < 2000; i++) {
		snprintf(key, sizeof(key), "w%d-%d", a->id, i);
		if (put(a->m, (uint64_t)a->id + 1, key, 512, 1) == 0)
			a->ok++;
	}
	return NULL;
}

static void test_master_remove_all_races_writers(void **state)
{
	/* Given: 4 writer threads putting at once */
	struct mst_master *m = master_new(NULL, NULL);
	struct writer_arg args[4];
	pthread_t t[4];
	struct mst_stats st;
	int64_t removed = 0;
	int ok = 0;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", 64 * MIB), 0);
	for (int i = 0; i < 4; i++) {
		args[i] = (struct writer_arg){m, i, 0};
		assert_int_equal(pthread_create(&t[i], NULL, writer, &args[i]), 0);
	}
	/* When: remove_all runs again and again meanwhile */
	for (int i = 0; i < 50; i++)
		removed += remove_all(m, NULL, 1);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		ok += args[i].ok;
	}
	removed += remove_all(m, NULL, 1);
	/* Then: every put succeeded, every key was removed exactly once, and
	 * the allocator is empty */
	assert_int_equal(ok, 4 * 2000);
	assert_int_equal(removed, ok);
	mst_master_stats(m, &st);
	assert_int_equal(st.keys, 0);
	assert_int_equal(st.processing, 0);
	assert_int_equal(st.used_bytes, 0);
	mst_master_destroy(m);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_evict_oldest_share,
		test_master_evict_put_again_counts_as_use, test_master_evict_never_protected,
		test_master_evict_soft_pinned_last, test_master_evict_soft_pinned_kept,
		test_master_evict_soft_pin_expires, test_master_evict_census_serves_later_rounds,
		test_master_evict_kept_census_passes_over_used,
		test_master_evict_kept_census_not_undercut,
		test_master_evict_kept_census_spares_soft_pins,
		test_master_evict_watermark_background, test_master_evict_put_may_wait,
		test_master_evict_fill_beyond_capacity, test_master_evict_not_for_what_cannot_fit,
		test_master_remove_all_races_writers)
