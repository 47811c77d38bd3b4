/*
 * test_disk_corruption.c - the SSD bucket store restarting over damaged
 * files: a flipped byte, a truncated or deleted bucket, torn metadata,
 * hostile metadata and stray names, records whose length or index runs far
 * out, many deletions scanned fast, and too few descriptors at restart.
 */
#include "tests/unit/test_disk_util.h"
#include "tests/cmocka_main.h"

static void poke(uint32_t id, const char *ext, off_t off)
{
	char p[400];
	unsigned char c;
	int fd;

	bucket_file(id, ext, p, sizeof(p));
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, off), 1);
	c ^= 0x40;
	assert_int_equal(pwrite(fd, &c, 1, off), 1);
	fsync(fd);
	close(fd);
}

static void cut(uint32_t id, const char *ext, off_t size)
{
	char p[400];

	bucket_file(id, ext, p, sizeof(p));
	assert_int_equal(truncate(p, size), 0);
}

static off_t fsize(uint32_t id, const char *ext)
{
	char p[400];
	struct stat sb;

	bucket_file(id, ext, p, sizeof(p));
	assert_int_equal(stat(p, &sb), 0);
	return sb.st_size;
}

static void test_disk_flipped_byte(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_stats stt;
	struct dsk_store *s = open_ok(&cfg, NULL);

	put3(s);
	poke(1, "dat", 64 * KIB + 100); /* inside "b" */
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 0), LUNAR_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), 64 * KIB);
	assert_int_equal(get_pat(s, "c", 64 * KIB, 3, 1), 64 * KIB);
	dsk_stats(s, &stt);
	assert_int_equal(stt.checksum_failures, 1);
	poke(1, "dat", 2 * 64 * KIB + 5); /* "c", found again only by the scan */
	dsk_store_close(s);

	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 1);
	assert_int_equal(scan.records_dropped, 2);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), 64 * KIB);
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "c", 64 * KIB, 3, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	dsk_stats(s, &stt);
	assert_int_equal(stt.dropped_at_scan, 2);
	dsk_store_close(s);
}

static void test_disk_truncated_bucket(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s = open_ok(&cfg, NULL);
	struct dsk_stats stt;

	put3(s);
	cut(1, "dat", 64 * KIB + 1000); /* "b" cut short, "c" gone */
	assert_int_equal(get_pat(s, "c", 64 * KIB, 3, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 1), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), 64 * KIB);
	dsk_stats(s, &stt);
	assert_int_equal(stt.read_failures, 2);
	dsk_store_close(s);

	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 1);
	assert_int_equal(scan.records_dropped, 2);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), 64 * KIB);
	dsk_store_close(s);
}

static void test_disk_deleted_bucket(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s;
	char p[400];
	int64_t rc;

	cfg.bucket_objects = 2;
	s = open_ok(&cfg, NULL);
	put3(s); /* a, b in bucket 1; c in bucket 2 */
	assert_int_equal(put_pat(s, "d", 64 * KIB, 4, 0), 0);
	assert_int_equal(put_pat(s, "e", 64 * KIB, 5, 0), 0); /* bucket 3 */
	/* deleted while open: the open file still serves right bytes, or a miss */
	bucket_file(1, "dat", p, sizeof(p));
	assert_int_equal(unlink(p), 0);
	rc = get_pat(s, "a", 64 * KIB, 1, 0);
	assert_true(rc == 64 * KIB || rc == LUNAR_ERR_OBJECT_NOT_FOUND);
	bucket_file(2, "meta", p, sizeof(p));
	assert_int_equal(unlink(p), 0);
	dsk_store_close(s);

	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 1);	   /* only "e" */
	assert_int_equal(scan.records_dropped, 2); /* a, b: data gone (c, d unlisted) */
	assert_int_equal(scan.buckets_dropped, 2);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "c", 64 * KIB, 3, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "e", 64 * KIB, 5, 0), 64 * KIB);
	assert_false(file_exists(1, "meta"));
	assert_false(file_exists(2, "dat"));
	dsk_store_close(s);
}

static void test_disk_torn_metadata(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s = open_ok(&cfg, NULL);

	put3(s);
	assert_int_equal(put_pat(s, "d", 100, 4, 0), 0);
	dsk_store_close(s);
	assert_int_equal(fsize(1, "meta"), 4 * 512);
	cut(1, "meta", 3 * 512 + 30); /* "d" torn inside its header */
	poke(1, "meta", 512 + 50);    /* "b": corrupt, the scan resyncs past it */
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 2);
	assert_int_equal(scan.records_dropped, 2);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), 64 * KIB);
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "c", 64 * KIB, 3, 0), 64 * KIB);
	assert_int_equal(get_pat(s, "d", 100, 4, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	dsk_store_close(s);

	cut(1, "meta", 2 * 512 + 200); /* "c" cut in its key */
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 1);
	assert_int_equal(scan.records_dropped, 2); /* b still corrupt, c torn */
	dsk_store_close(s);
}

/* Write n bytes at offset at of metadata record rec (one 512-byte block)
 * of bucket id and recompute its CRC32C: a record that checks out but says
 * something the store never wrote. */
static void patch_record(uint32_t id, unsigned rec, size_t at, const void *bytes, size_t n)
{
	static const char zero[4];
	unsigned char r[512];
	struct dsk_meta_hdr h;
	uint32_t crc;
	char p[400];
	int fd;

	bucket_file(id, "meta", p, sizeof(p));
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, r, sizeof(r), rec * 512), sizeof(r));
	memcpy(&h, r, sizeof(h));
	assert_int_equal(h.rec_len, sizeof(r));
	memcpy(r + at, bytes, n);
	crc = lc_crc32c(0, r, 4);
	crc = lc_crc32c(crc, zero, 4);
	crc = lc_crc32c(crc, r + 8, sizeof(r) - 8);
	memcpy(r + 4, &crc, 4);
	assert_int_equal(pwrite(fd, r, sizeof(r), rec * 512), sizeof(r));
	close(fd);
}

static void touch(const char *name)
{
	char p[400];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "junk", 4), 4);
	close(fd);
}

/* A metadata record naming index 2^31 (once: a startup that never ended),
 * and stray files named as the last bucket ids (once: every later put
 * failed, the numbering having wrapped onto bucket 1). The record is
 * dropped, the strays removed, and new buckets keep being made. */
static void test_disk_hostile_metadata(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s = open_ok(&cfg, NULL);
	uint32_t index = 0x80000000u;

	put3(s);
	dsk_store_close(s);
	patch_record(1, 1, offsetof(struct dsk_meta_hdr, index), &index, sizeof(index)); /* "b" */
	touch("bfffffffe.dat");
	touch("bffffffff.meta");
	alarm(30); /* a scan that loops fails the test rather than hangs it */
	cfg.bucket_objects = 1;
	s = open_ok(&cfg, &scan);
	alarm(0);
	assert_int_equal(scan.records_ok, 2);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), 64 * KIB);
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_false(file_exists(0xfffffffeu, "dat"));
	assert_false(file_exists(0xffffffffu, "meta"));
	for (int i = 0; i < 4; i++) {
		char key[16];

		snprintf(key, sizeof(key), "new%d", i);
		assert_int_equal(put_pat(s, key, 4 * KIB, 10 + (unsigned)i, 0), 0);
	}
	dsk_store_close(s);
}

/* A record whose checksum holds but whose key no client could have stored
 * (a control character in it) is dropped at the scan, not indexed. */
static void test_disk_bad_key_in_metadata(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s = open_ok(&cfg, NULL);
	const char ctl = '\x01';

	put3(s);
	dsk_store_close(s);
	/* record 1 is "b": the tenant "default", then the key */
	patch_record(1, 1, sizeof(struct dsk_meta_hdr) + strlen(T), &ctl, 1);
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 2);
	assert_int_equal(scan.records_dropped, 1);
	assert_int_equal(get_pat(s, "b", 64 * KIB, 2, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "c", 64 * KIB, 3, 0), 64 * KIB);
	dsk_store_close(s);
}

/* Grow bucket id's data file to size bytes, as a sparse file. */
static void sparse_dat(uint32_t id, uint64_t size)
{
	char p[400];

	bucket_file(id, "dat", p, sizeof(p));
	assert_int_equal(truncate(p, (off_t)size), 0);
}

/* What the store takes of its capacity, after a restart. */
static uint64_t used_of(struct dsk_store *s)
{
	struct dsk_stats stt;

	dsk_stats(s, &stt);
	return stt.used;
}

/* A record whose metadata checksum holds but whose length runs 1 TiB into a
 * sparse data file: the scan read all of it before comparing its checksum,
 * and the start-up never ended. Now it is dropped unread. */
static void test_disk_huge_length_not_read(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s = open_ok(&cfg, NULL);
	uint64_t len = (1ull << 40) - 64 * KIB;

	put3(s);
	dsk_store_close(s);
	sparse_dat(1, 1ull << 40);
	patch_record(1, 1, offsetof(struct dsk_meta_hdr, length), &len, sizeof(len)); /* "b" */
	alarm(20); /* the old scan: hours */
	s = open_ok(&cfg, &scan);
	alarm(0);
	assert_int_equal(scan.records_ok, 2);
	assert_int_equal(scan.records_dropped, 1);
	/* and the holes do not count as used: a put evicts nothing */
	assert_true(used_of(s) < cfg.capacity);
	assert_int_equal(put_pat(s, "d", 4 * KIB, 4, 0), 0);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), 64 * KIB);
	dsk_store_close(s);
}

/* A dropped record (past the data file) near 2^63 set the bucket's size:
 * used jumped past the capacity, the next put evicted the good records and
 * still failed. Only verified records count now. */
static void test_disk_dropped_record_not_counted(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s = open_ok(&cfg, NULL);
	uint64_t off = 0x7ffffffffffff000ull, len = 0xfff;

	put3(s);
	dsk_store_close(s);
	patch_record(1, 1, offsetof(struct dsk_meta_hdr, offset), &off, sizeof(off)); /* "b" */
	patch_record(1, 1, offsetof(struct dsk_meta_hdr, length), &len, sizeof(len));
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_dropped, 1);
	assert_true(used_of(s) < cfg.capacity);
	assert_int_equal(put_pat(s, "d", 4 * KIB, 4, 0), 0);
	assert_int_equal(get_pat(s, "a", 64 * KIB, 1, 0), 64 * KIB);
	assert_int_equal(get_pat(s, "c", 64 * KIB, 3, 0), 64 * KIB);
	dsk_store_close(s);
}

/* Append one record to fd: index idx naming key, and for a PUT the data
 * [0, len) with checksum crc. */
static void meta_append(int fd, enum dsk_meta_type type, uint32_t idx, const char *key,
			uint64_t len, uint32_t crc)
{
	unsigned char r[512];
	uint32_t n = dsk_meta_size(strlen(T), strlen(key));

	assert_true(n <= sizeof(r));
	dsk_meta_encode(r, type, idx, 0, len, crc, T, strlen(T), key, strlen(key));
	assert_int_equal(write(fd, r, n), (ssize_t)n);
}

/* A metadata file of many PUT records, each later deleted: the scan matched
 * every DEL against every record before it (160k of each: ~10^10 steps,
 * tens of seconds; a full 256 MiB file, hours). A PUT after the deletions
 * stays live, and the deleted records count as neither kept nor dropped. */
static void test_disk_many_deletions_scan_fast(void **st)
{
	enum { N = 160000 };
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s;
	unsigned char data[4 * KIB];
	char p[400], key[16];
	int mfd, dfd;

	cfg.bucket_objects = 1u << 20;
	dsk_store_close(open_ok(&cfg, NULL)); /* makes the directory */
	test_fill(data, sizeof(data), 7);
	bucket_file(1, "dat", p, sizeof(p));
	dfd = open(p, O_CREAT | O_WRONLY, 0644);
	assert_true(dfd >= 0);
	assert_int_equal(write(dfd, data, sizeof(data)), (ssize_t)sizeof(data));
	close(dfd);
	bucket_file(1, "meta", p, sizeof(p));
	mfd = open(p, O_CREAT | O_WRONLY, 0644);
	assert_true(mfd >= 0);
	for (uint32_t i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		meta_append(mfd, DSK_META_PUT, i, key, sizeof(data),
			    lc_crc32c(0, data, sizeof(data)));
	}
	for (uint32_t i = 0; i < N; i++)
		meta_append(mfd, DSK_META_DEL, i, "k", 0, 0);
	meta_append(mfd, DSK_META_PUT, N, "live", sizeof(data), lc_crc32c(0, data, sizeof(data)));
	close(mfd);
	alarm(10);
	s = open_ok(&cfg, &scan);
	alarm(0);
	assert_int_equal(scan.records_ok, 1);
	assert_int_equal(scan.records_dropped, 0);
	assert_int_equal(get_pat(s, "k0", 4 * KIB, 7, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "live", 4 * KIB, 7, 0), 4 * KIB);
	dsk_store_close(s);
}

/* Out of descriptors at restart: the buckets that cannot be opened are left
 * on disk (once: deleted as unusable), and a later start finds them all. */
static void test_disk_out_of_descriptors_keeps_buckets(void **st)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct rlimit old, low;
	struct dsk_store *s;
	char key[16];

	cfg.bucket_objects = 1;
	s = open_ok(&cfg, NULL);
	for (int i = 0; i < 20; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(put_pat(s, key, 4 * KIB, (unsigned)i, 0), 0);
	}
	dsk_store_close(s);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)test_open_fds() + 16; /* the store, and a few buckets */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	s = NULL;
	if (dsk_store_open(&cfg, &s, &scan) == 0) {
		assert_true(scan.records_ok < 20);
		dsk_store_close(s);
	}
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 20);
	for (int i = 0; i < 20; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(get_pat(s, key, 4 * KIB, (unsigned)i, 0), 4 * KIB);
	}
	dsk_store_close(s);
}

LUNAR_TEST_MAIN_EACH(setup_var, teardown, test_disk_flipped_byte, test_disk_truncated_bucket,
		     test_disk_deleted_bucket, test_disk_torn_metadata, test_disk_hostile_metadata,
		     test_disk_bad_key_in_metadata, test_disk_huge_length_not_read,
		     test_disk_dropped_record_not_counted, test_disk_many_deletions_scan_fast,
		     test_disk_out_of_descriptors_keeps_buckets)
