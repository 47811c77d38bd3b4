/*
 * test_disk_batch.c - the packed paths of the bucket store: dsk_put_batch
 * writes many objects (aligned ones straight from the caller, odd sizes
 * and addresses staged) that read back byte for byte, one by one and with
 * dsk_get_batch into aligned and unaligned buffers, before and after a
 * restart scan (io_uring, synchronous I/O, and buffered files); a failed group write fails its objects only and leaves
 * nothing readable of them; a batch that fills the store evicts instead of
 * waiting on its own pending records.
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
		fill(v->buf[i] + mis, v->len[i], i + 1);
		snprintf(v->key[i], sizeof(v->key[i]), "%s-%u", prefix, i);
		v->it[i] = (struct dsk_put_item){.tenant = T,
						 .key = v->key[i],
						 .buf = v->buf[i] + mis,
						 .len = v->len[i],
						 .crc32c = lc_crc32c(0, v->buf[i] + mis, v->len[i])};
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

		fill(want, v->len[i], i + 1);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_disk_batch_roundtrip, setup_var, teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_roundtrip_sync_io, setup_var,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_roundtrip_buffered, setup_var,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_write_failure, setup_var, teardown),
	    cmocka_unit_test_setup_teardown(test_disk_batch_fills_and_evicts, setup_var, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
