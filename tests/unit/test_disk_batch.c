/*
 * test_disk_batch.c - the packed paths of the bucket store: dsk_put_batch
 * writes many objects (aligned ones straight from the caller, odd sizes
 * and addresses staged) that read back byte for byte, one by one and with
 * dsk_get_batch into aligned and unaligned buffers, before and after a
 * restart scan (io_uring, synchronous I/O, and buffered files); a failed
 * group write fails its objects only and leaves nothing readable of them;
 * a batch that fills the store evicts instead of waiting on its own
 * pending records. The clock policy moves the records of the oldest bucket
 * read since written to a newer one (telling moved, and notify only of
 * the others), up to half the bucket.
 */
#include "test_disk_util.h"

#define N 300 /* > DSK_BATCH_MAX items of the proxy's offload batch */

struct vals {
	unsigned char *buf[N];
	size_t len[N];
	char key[N][32];
	struct dsk_put_item it[N];
};

/* Sizes: mostly 64 KiB, some odd; every 7th at an odd address. */
static struct vals *vals_make(unsigned n, const char *prefix)
{
	struct vals *v = calloc(1, sizeof(*v));

	assert_non_null(v);
	for (unsigned i = 0; i < n; i++) {
		size_t mis = i % 7 == 3 ? 100 : 0;

		v->len[i] = i % 5 == 4 ? 10000 + i : 64 * KIB;
		assert_int_equal(posix_memalign((void **)&v->buf[i], 4096, v->len[i] + mis), 0);
		test_fill(v->buf[i] + mis, v->len[i], i + 1);
		snprintf(v->key[i], sizeof(v->key[i]), "%s-%u", prefix, i);
		v->it[i] = (struct dsk_put_item){.tenant = T, .key = v->key[i]};
		v->it[i].buf = v->buf[i] + mis;
		v->it[i].len = v->len[i];
		v->it[i].crc32c = lc_crc32c(0, v->buf[i] + mis, v->len[i]);
	}
	return v;
}

static void vals_free(struct vals *v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		free(v->buf[i]);
	free(v);
}

/* dsk_get_batch of the n values, every other one into an unaligned buffer;
 * each must read back exactly (or, if allow_missing, be absent). */
static unsigned get_all(struct dsk_store *s, struct vals *v, unsigned n, int allow_missing)
{
	struct dsk_get_item g[N];
	unsigned char *raw[N];
	unsigned found = 0;

	for (unsigned i = 0; i < n; i++) {
		size_t mis = i % 2 ? 40 : 0;

		assert_int_equal(posix_memalign((void **)&raw[i], 4096, v->len[i] + 4096 + mis), 0);
		g[i] = (struct dsk_get_item){
		    .tenant = T, .key = v->key[i], .buf = raw[i] + mis, .cap = v->len[i] + 4096};
	}
	dsk_get_batch(s, g, n);
	for (unsigned i = 0; i < n; i++) {
		unsigned char *want = malloc(v->len[i]);

		test_fill(want, v->len[i], i + 1);
		if (g[i].res == LUNAR_ERR_OBJECT_NOT_FOUND && allow_missing) {
			free(want);
			free(raw[i]);
			continue;
		}
		assert_int_equal(g[i].res, (int64_t)v->len[i]);
		assert_memory_equal(g[i].buf, want, v->len[i]);
		assert_int_equal(g[i].crc32c, v->it[i].crc32c);
		found++;
		free(want);
		free(raw[i]);
	}
	return found;
}

static void batch_roundtrip(int sync_io)
{
	struct dsk_config cfg = cfg_base(256 * MIB);
	struct vals *v = vals_make(N, "k");
	struct dsk_scan_stats scan;
	struct dsk_store *s;

	cfg.force_sync_io = sync_io;
	cfg.bucket_objects = 100; /* groups end at bucket boundaries too */
	s = open_ok(&cfg, NULL);
	dsk_put_batch(s, v->it, N);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(v->it[i].rc, 0);
	assert_int_equal(get_all(s, v, N, 0), N);
	for (unsigned i = 0; i < N; i += 37)
		assert_int_equal(get_pat(s, v->key[i], v->len[i], i + 1, 0), (int64_t)v->len[i]);
	/* the same keys again: already stored, first value kept */
	dsk_put_batch(s, v->it, 3);
	assert_int_equal(v->it[0].rc, LUNAR_ERR_OBJECT_ALREADY_EXISTS);
	dsk_store_close(s);
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, N);
	assert_int_equal(scan.records_dropped, 0);
	assert_int_equal(get_all(s, v, N, 0), N);
	dsk_store_close(s);
	vals_free(v, N);
}

static void test_disk_batch_roundtrip(void **state)
{
	batch_roundtrip(0);
}

static void test_disk_batch_roundtrip_sync_io(void **state)
{
	batch_roundtrip(1);
}

static void test_disk_batch_roundtrip_buffered(void **state)
{
	dsk_test_no_direct(1);
	batch_roundtrip(0);
	dsk_test_no_direct(0);
}

static void test_disk_batch_write_failure(void **state)
{
	struct dsk_config cfg = cfg_base(256 * MIB);
	struct vals *v = vals_make(40, "f");
	struct dsk_store *s = open_ok(&cfg, NULL);
	struct dsk_stats st;
	unsigned failed = 0;

	dsk_test_inject(s, DSK_IO_WRITE, EIO);
	dsk_put_batch(s, v->it, 40);
	for (unsigned i = 0; i < 40; i++)
		failed += v->it[i].rc == LUNAR_ERR_FILE_WRITE_FAIL;
	assert_true(failed > 0);
	assert_true(get_all(s, v, 40, 1) == 40 - failed);
	dsk_stats(s, &st);
	assert_int_equal(st.write_failures, failed);
	dsk_store_close(s);
	vals_free(v, 40);
}

static void test_disk_batch_fills_and_evicts(void **state)
{
	/* Room for about 120 of the 300: the batch evicts older buckets as it
	 * goes, never waiting on the records it has pending itself. */
	struct dsk_config cfg = cfg_base(8 * MIB);
	struct vals *v = vals_make(N, "e");
	struct dsk_store *s;
	unsigned ok = 0;

	cfg.bucket_objects = 20;
	s = open_ok(&cfg, NULL);
	dsk_put_batch(s, v->it, N);
	for (unsigned i = 0; i < N; i++)
		ok += v->it[i].rc == 0;
	assert_int_equal(ok, N);
	assert_true(get_all(s, v, N, 1) > 20);
	dsk_store_close(s);
	vals_free(v, N);
}

struct told {
	uint64_t first; /* the first bucket's id */
	size_t notified, moved;
	uint64_t moved_loc[N];
};

static int count_notify(void *arg, const struct dsk_record *recs, size_t n)
{
	struct told *t = arg;

	for (size_t i = 0; i < n; i++)
		assert_int_equal(recs[i].location >> 32, t->first);
	t->notified += n;
	return 0;
}

static void count_moved(void *arg, const struct dsk_record *recs, size_t n)
{
	struct told *t = arg;

	for (size_t i = 0; i < n; i++) {
		assert_true(recs[i].location >> 32 > t->first); /* now in a newer bucket */
		t->moved_loc[t->moved++] = recs[i].location;
	}
}

static void test_disk_batch_clock_rescues_read_records(void **state)
{
	struct dsk_config cfg = cfg_base(256 * MIB);
	struct vals *v = vals_make(60, "c");
	struct told t = {0};
	struct dsk_scan_stats scan;
	struct dsk_record rec;
	struct dsk_store *s;

	cfg.bucket_objects = 20;
	cfg.policy = DSK_CLOCK;
	cfg.notify = count_notify;
	cfg.moved = count_moved;
	cfg.notify_arg = &t;
	s = open_ok(&cfg, NULL);
	dsk_put_batch(s, v->it, 60); /* three buckets */
	t.first = v->it[0].location >> 32;
	/* read 3 records of the first bucket */
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(get_pat(s, v->key[i * 5], v->len[i * 5], i * 5 + 1, 0),
				 (int64_t)v->len[i * 5]);
	assert_true(dsk_evict(s) > 0);
	assert_int_equal(t.moved, 3);
	assert_int_equal(t.notified, 17);
	for (unsigned i = 0; i < 20; i++) {
		int64_t rc = get_pat(s, v->key[i], v->len[i], i + 1, 0);

		assert_int_equal(rc, i % 5 == 0 && i < 15 ? (int64_t)v->len[i]
							  : LUNAR_ERR_OBJECT_NOT_FOUND);
	}
	assert_int_equal(dsk_lookup(s, T, v->key[5], &rec), 0);
	assert_int_equal(rec.location, t.moved_loc[1]);
	dsk_store_close(s);
	s = open_ok(&cfg, &scan); /* the moved copies are there after a restart */
	assert_int_equal(scan.records_ok, 43);
	assert_int_equal(get_all(s, v, 60, 1), 43);
	dsk_store_close(s);
	vals_free(v, 60);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_disk_batch_roundtrip, setup_var, teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_roundtrip_sync_io, setup_var, teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_roundtrip_buffered, setup_var,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_write_failure, setup_var, teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_fills_and_evicts, setup_var, teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_clock_rescues_read_records, setup_var,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
