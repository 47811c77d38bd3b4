/*
 * test_disk.c - the SSD bucket store on real files in temp dirs: byte-exact
 * round trips from 1 B to 8 MiB (io_uring and sync backends, O_DIRECT and
 * buffered), restart scans, concurrent use, a read that tells the record
 * it read when the key was stored anew under it, and a throughput figure
 * for 1 MiB objects (printed, not asserted; only with LUNAR_DISK_BENCH=1).
 */
#include "tests/unit/test_disk_util.h"
#include "tests/cmocka_main.h"

static const size_t sizes[] = {1,   100,       4095,	4096,	     4097,   65539,
			       MIB, MIB + 512, 4 * MIB, 4 * MIB + 1, 8 * MIB};

static void roundtrip(int force_sync, int expect_direct)
{
	struct dsk_config cfg = cfg_base(256ull * MIB);
	struct dsk_store *s;
	struct dsk_stats stt;
	char key[64];

	cfg.force_sync_io = force_sync;
	cfg.bucket_bytes = 16 * MIB;
	s = open_ok(&cfg, NULL);
	dsk_stats(s, &stt);
	assert_int_equal(stt.uring, !force_sync);
	if (expect_direct >= 0)
		assert_int_equal(stt.direct, expect_direct);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (size_t mis = 0; mis < 2; mis++) {
			snprintf(key, sizeof(key), "obj-%zu-%zu", sizes[i], mis);
			assert_int_equal(put_pat(s, key, sizes[i], (unsigned)i, mis ? 3 : 0), 0);
		}
	}
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (size_t mis = 0; mis < 2; mis++) {
			snprintf(key, sizeof(key), "obj-%zu-%zu", sizes[i], mis);
			/* read aligned what was written unaligned, and the reverse */
			assert_int_equal(get_pat(s, key, sizes[i], (unsigned)i, mis ? 0 : 5),
					 sizes[i]);
		}
	}
	/* scatter: three pieces in, two out */
	{
		unsigned char *a = malloc(3 * MIB), *b = malloc(3 * MIB);
		struct iovec in[3] = {{a, 5000}, {a + 5000, MIB}, {a + 5000 + MIB, 123}};
		size_t n = 5000 + MIB + 123;
		struct iovec out[2] = {{b, 777}, {b + 777, 2 * MIB}};

		test_fill(a, n, 99);
		assert_int_equal(dsk_put(s, T, "scatter", in, 3, lc_crc32c(0, a, n), NULL), 0);
		assert_int_equal(dsk_get(s, T, "scatter", out, 2, NULL), n);
		assert_memory_equal(a, b, n);
		assert_int_equal(dsk_put(s, T, "scatter", in, 3, lc_crc32c(0, a, n), NULL),
				 LUNAR_ERR_OBJECT_ALREADY_EXISTS);
		out[1].iov_len = 100;
		assert_int_equal(dsk_get(s, T, "scatter", out, 2, NULL), LUNAR_ERR_BUFFER_OVERFLOW);
		assert_int_equal(dsk_get(s, T, "nope", out, 2, NULL), LUNAR_ERR_OBJECT_NOT_FOUND);
		assert_int_equal(dsk_put(s, T, "", in, 3, 0, NULL), LUNAR_ERR_INVALID_KEY);
		assert_int_equal(dsk_put(s, "bad tenant!", "k", in, 3, 0, NULL),
				 LUNAR_ERR_INVALID_PARAMS);
		in[0].iov_len = 0;
		assert_int_equal(dsk_put(s, T, "zero", in, 1, 0, NULL), LUNAR_ERR_INVALID_PARAMS);
		free(a);
		free(b);
	}
	dsk_stats(s, &stt);
	assert_int_equal(stt.records, 2 * sizeof(sizes) / sizeof(sizes[0]) + 1);
	assert_int_equal(stt.write_failures + stt.read_failures + stt.checksum_failures, 0);
	dsk_store_close(s);
}

static void test_disk_roundtrip_uring(void **st)
{
	roundtrip(0, -1);
}

static void test_disk_roundtrip_sync(void **st)
{
	roundtrip(1, -1);
}

/* tmpfs took no O_DIRECT before Linux 6.6; newer kernels take it. Either way
 * the store must work there, and the buffered path is also forced once. */
static void test_disk_roundtrip_tmpfs(void **st)
{
	struct dsk_config cfg;
	struct dsk_store *s;
	struct dsk_stats stt;
	struct stat sb;

	if (stat("/dev/shm", &sb) < 0 || access("/dev/shm", W_OK) < 0) {
		print_message("skip: no writable /dev/shm\n");
		skip();
	}
	tmp_clean();
	tmp_make("/dev/shm");
	cfg = cfg_base(MIB);
	s = open_ok(&cfg, NULL);
	dsk_stats(s, &stt);
	print_message("/dev/shm: direct=%d\n", stt.direct);
	dsk_store_close(s);
	roundtrip(0, -1);
	tmp_clean();
	tmp_make("/dev/shm");
	dsk_test_no_direct(1);
	roundtrip(0, 0);
	tmp_clean();
	tmp_make("/dev/shm");
	roundtrip(1, 0);
	dsk_test_no_direct(0);
}

/* The buffered path on a disk-backed filesystem, then reopened with
 * O_DIRECT: the files are readable either way. */
static void test_disk_buffered_fallback(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s;

	dsk_test_no_direct(1);
	roundtrip(0, 0);
	s = open_ok(&cfg, NULL);
	put3(s);
	assert_int_equal(put_pat(s, "tail", 5000, 7, 1), 0);
	dsk_store_close(s);
	dsk_test_no_direct(0);
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_dropped, 0);
	assert_int_equal(get_pat(s, "tail", 5000, 7, 0), 5000);
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 1), 64 * KIB);
	assert_int_equal(get_pat(s, "obj-1-1", 1, 0, 0), 1);
	dsk_store_close(s);
}

static void test_disk_direct_on_disk(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_store *s = open_ok(&cfg, NULL);
	struct dsk_stats stt;

	dsk_stats(s, &stt);
	print_message("%s: direct=%d uring=%d\n", base, stt.direct, stt.uring);
	dsk_store_close(s);
}

static int count_rec(void *arg, const struct dsk_record *r)
{
	(*(int *)arg)++;
	return 0;
}

static void test_disk_reopen(void **st)
{
	struct dsk_config cfg = cfg_base(256 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_stats stt;
	struct dsk_store *s;
	char key[32];
	int n = 0;

	cfg.bucket_objects = 4;
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.buckets + scan.records_ok + scan.records_dropped, 0);
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(put_pat(s, key, 10000 + i * 3000, i, i & 1), 0);
	}
	assert_int_equal(dsk_remove(s, T, "k3"), 0);
	assert_int_equal(dsk_remove(s, T, "k3"), LUNAR_ERR_OBJECT_NOT_FOUND);
	dsk_store_close(s);

	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 9);
	assert_int_equal(scan.records_dropped, 0);
	assert_int_equal(scan.buckets, 3);
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(get_pat(s, key, 10000 + i * 3000, i, 0),
				 i == 3 ? LUNAR_ERR_OBJECT_NOT_FOUND : 10000 + i * 3000);
	}
	dsk_list(s, count_rec, &n);
	assert_int_equal(n, 9);
	/* new objects go to a new bucket; reused key after remove is fine */
	assert_int_equal(put_pat(s, "k3", 5000, 33, 0), 0);
	assert_true(file_exists(4, "dat"));
	dsk_stats(s, &stt);
	assert_int_equal(stt.records, 10);
	assert_int_equal(stt.buckets, 4);
	dsk_store_close(s);

	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 10);
	assert_int_equal(get_pat(s, "k3", 5000, 33, 0), 5000);
	dsk_store_close(s);
}

struct worker {
	struct dsk_store *s;
	int id;
	int bad;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char key[32];

	for (int i = 0; i < 150; i++) {
		size_t n = 1000 + (size_t)((i * 7919 + w->id * 104729) % (200 * KIB));
		int64_t rc;

		snprintf(key, sizeof(key), "w%d-%d", w->id, i);
		if (put_pat(w->s, key, n, (unsigned)(w->id * 1000 + i), (size_t)(i & 1)) != 0)
			w->bad++;
		rc = get_pat(w->s, key, n, (unsigned)(w->id * 1000 + i), 0);
		if (rc != (int64_t)n && rc != LUNAR_ERR_OBJECT_NOT_FOUND)
			w->bad++;
		if (i % 5 == 0 && i >= 5) {
			snprintf(key, sizeof(key), "w%d-%d", w->id, i - 5);
			dsk_remove(w->s, T, key);
		}
	}
	return NULL;
}

static void test_disk_concurrent(void **st)
{
	struct dsk_config cfg = cfg_base(8 * MIB);
	struct worker w[6];
	pthread_t t[6];
	struct dsk_store *s;
	struct dsk_scan_stats scan;
	struct dsk_stats stt;

	cfg.bucket_bytes = 1 * MIB;
	cfg.bucket_objects = 10;
	s = open_ok(&cfg, NULL);
	for (int i = 0; i < 6; i++) {
		w[i] = (struct worker){.s = s, .id = i};
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < 6; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].bad, 0);
	}
	dsk_stats(s, &stt);
	assert_true(stt.evicted_buckets > 0);
	assert_true(stt.used <= stt.capacity);
	assert_int_equal(stt.write_failures + stt.read_failures + stt.checksum_failures, 0);
	dsk_store_close(s);
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_dropped, 0);
	assert_int_equal(scan.records_ok, stt.records);
	dsk_store_close(s);
}

static double bench_threads(struct dsk_store *s, int nthreads, int per, int write);

struct bench_arg {
	struct dsk_store *s;
	int id, per, write;
	void *buf;
	uint32_t crc;
};

static void *bench_main(void *arg)
{
	struct bench_arg *a = arg;
	struct iovec iov = {a->buf, MIB};
	char key[32];

	for (int i = 0; i < a->per; i++) {
		snprintf(key, sizeof(key), "bench-%d-%d", a->id, i);
		if (a->write)
			assert_int_equal(dsk_put(a->s, T, key, &iov, 1, a->crc, NULL), 0);
		else
			assert_int_equal(dsk_get(a->s, T, key, &iov, 1, NULL), MIB);
	}
	return NULL;
}

static double bench_threads(struct dsk_store *s, int nthreads, int per, int write)
{
	struct bench_arg a[8];
	pthread_t t[8];
	uint64_t t0 = lc_now_ns();

	for (int i = 0; i < nthreads; i++) {
		a[i] = (struct bench_arg){.s = s, .id = i, .per = per, .write = write};
		assert_int_equal(posix_memalign(&a[i].buf, 4096, MIB), 0);
		test_fill(a[i].buf, MIB, 42);
		a[i].crc = lc_crc32c(0, a[i].buf, MIB);
		pthread_create(&t[i], NULL, bench_main, &a[i]);
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i], NULL);
		free(a[i].buf);
	}
	return (double)nthreads * per * MIB / 1e9 / ((double)(lc_now_ns() - t0) / 1e9);
}

static void test_disk_throughput(void **st)
{
	struct dsk_config cfg = cfg_base(4096ull * MIB);
	struct dsk_store *s;
	struct dsk_stats stt;
	const int total = 1024; /* 1 GiB */

	if (!getenv("LUNAR_DISK_BENCH")) {
		print_message("skip: set LUNAR_DISK_BENCH=1 to measure 1 MiB put/get GB/s\n");
		skip();
	}
	for (int nt = 1; nt <= 4; nt *= 4) {
		double w, r;

		s = open_ok(&cfg, NULL);
		dsk_stats(s, &stt);
		w = bench_threads(s, nt, total / nt, 1);
		r = bench_threads(s, nt, total / nt, 0);
		print_message("disk_bench dir=%s obj=1MiB objs=%d threads=%d direct=%d io=%s "
			      "write_gbps=%.2f read_gbps=%.2f\n",
			      base, total, nt, stt.direct, stt.uring ? "io_uring" : "sync", w, r);
		dsk_store_close(s);
		tmp_clean();
		setup_var(st);
	}
}

/* Once: store key "k" anew (another value) while a read of it runs. */
static void restore_k(void *arg)
{
	struct dsk_store *s = arg;

	dsk_test_read_hook(s, NULL, NULL);
	assert_int_equal(dsk_remove(s, T, "k"), 0);
	assert_int_equal(put_pat(s, "k", 5000, 2, 0), 0);
}

/* A read tells the record it read, not the one the key names after: the
 * caller checks the bytes it got against their own CRC32C, and a record
 * stored under the key meanwhile is another value. */
static void test_disk_get_tells_record_read(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_store *s = open_ok(&cfg, NULL);
	unsigned char *buf = malloc(8192), *want = malloc(4096);
	struct iovec v = {buf, 8192};
	struct dsk_record rec = {0}, now;

	assert_non_null(buf);
	assert_non_null(want);
	test_fill(want, 4096, 1);
	assert_int_equal(put_pat(s, "k", 4096, 1, 0), 0);
	dsk_test_read_hook(s, restore_k, s);
	assert_int_equal(dsk_get(s, T, "k", &v, 1, &rec), 4096); /* the first value, pinned */
	assert_memory_equal(buf, want, 4096);
	assert_non_null(rec.key);
	assert_int_equal(rec.length, 4096);
	assert_int_equal(rec.crc32c, lc_crc32c(0, want, 4096));
	assert_int_equal(dsk_lookup(s, T, "k", &now), 0);
	assert_int_equal(now.length, 5000); /* the key names the second now */
	assert_int_not_equal(now.crc32c, rec.crc32c);
	/* Too little room: no read, but the record found is told. */
	rec = (struct dsk_record){0};
	v.iov_len = 4096;
	assert_int_equal(dsk_get(s, T, "k", &v, 1, &rec), LUNAR_ERR_BUFFER_OVERFLOW);
	assert_non_null(rec.key);
	assert_int_equal(rec.crc32c, now.crc32c);
	v.iov_len = 8192;
	rec = (struct dsk_record){0};
	assert_int_equal(dsk_get(s, T, "nope", &v, 1, &rec), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_null(rec.key); /* none found: untouched */
	free(buf);
	free(want);
	dsk_store_close(s);
}

LUNAR_TEST_MAIN_EACH(setup_var, teardown, test_disk_roundtrip_uring, test_disk_roundtrip_sync,
		     test_disk_roundtrip_tmpfs, test_disk_direct_on_disk,
		     test_disk_buffered_fallback, test_disk_reopen, test_disk_concurrent,
		     test_disk_get_tells_record_read, test_disk_throughput)
