/*
 * test_disk_util.h - what the test_disk*.c binaries share: a temp dir per
 * case (setup_var, teardown), patterned values put and checked at any
 * alignment, a store opened from a base config, and the bucket files' names.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_DISK_UTIL_H
#define LUNAR_TESTS_UNIT_TEST_DISK_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#define _XOPEN_SOURCE_EXTRA
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "disk/disk.h"
#include "disk/dsk_int.h"
#include "lunar.h"
#include "tests/unit/test_fds.h"
#include "tests/unit/test_fill.h"

#define KIB (1u << 10)
#define MIB (1u << 20)
#define T   "default"

static char base[256];
static char dir[300];

static inline int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(p);
}

static inline void tmp_make(const char *root)
{
	snprintf(base, sizeof(base), "%s/lunar-disk-XXXXXX", root);
	assert_non_null(mkdtemp(base));
	snprintf(dir, sizeof(dir), "%s/store", base);
}

static inline void tmp_clean(void)
{
	nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline int setup_var(void **st)
{
	tmp_make(access("/var/tmp", W_OK) == 0 ? "/var/tmp" : "/tmp");
	return 0;
}

static inline int teardown(void **st)
{
	tmp_clean();
	return 0;
}

static inline struct dsk_config cfg_base(uint64_t capacity)
{
	return (struct dsk_config){.dir = dir, .capacity = capacity};
}

static inline struct dsk_store *open_ok(const struct dsk_config *cfg, struct dsk_scan_stats *scan)
{
	struct dsk_store *s = NULL;

	assert_int_equal(dsk_store_open(cfg, &s, scan), 0);
	assert_non_null(s);
	return s;
}

/* Put n bytes of pattern seed under key from a buffer at misalign. */
static inline int put_pat(struct dsk_store *s, const char *key, size_t n, unsigned seed,
			  size_t misalign)
{
	unsigned char *raw = NULL;
	struct iovec iov;
	int rc;

	assert_int_equal(posix_memalign((void **)&raw, 4096, n + misalign), 0);
	test_fill(raw + misalign, n, seed);
	iov = (struct iovec){raw + misalign, n};
	rc = dsk_put(s, T, key, &iov, 1, lc_crc32c(0, raw + misalign, n), NULL);
	free(raw);
	return rc;
}

/* Read key and compare with the pattern: returns dsk_get's result, and
 * fails the test if success came with wrong bytes. */
static inline int64_t get_pat(struct dsk_store *s, const char *key, size_t n, unsigned seed,
			      size_t misalign)
{
	unsigned char *raw = NULL, *want = malloc(n);
	struct iovec iov;
	int64_t rc;

	assert_non_null(want);
	assert_int_equal(posix_memalign((void **)&raw, 4096, n + misalign + 64), 0);
	memset(raw, 0xee, n + misalign + 64);
	iov = (struct iovec){raw + misalign, n + 64};
	rc = dsk_get(s, T, key, &iov, 1, NULL);
	if (rc >= 0) {
		test_fill(want, n, seed);
		assert_int_equal(rc, n);
		assert_memory_equal(raw + misalign, want, n);
	}
	free(raw);
	free(want);
	return rc;
}

static inline void bucket_file(uint32_t id, const char *ext, char *out, size_t cap)
{
	snprintf(out, cap, "%s/b%08x.%s", dir, id, ext);
}

static inline int file_exists(uint32_t id, const char *ext)
{
	char p[400];

	bucket_file(id, ext, p, sizeof(p));
	return access(p, F_OK) == 0;
}

static inline void put3(struct dsk_store *s)
{
	assert_int_equal(put_pat(s, "a", 64 * KIB, 1, 0), 0);
	assert_int_equal(put_pat(s, "b", 64 * KIB, 2, 1), 0);
	assert_int_equal(put_pat(s, "c", 64 * KIB, 3, 0), 0);
}

#endif /* LUNAR_TESTS_UNIT_TEST_DISK_UTIL_H */
