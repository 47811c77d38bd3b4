/*
 * test_engine_disk.c - reads of a peer's disk tier over the data port
 * (eng_xfer_disk), the owner's tier played by a table of values: a read
 * returns the value's bytes and CRC32C; the owner reads into a buffer of
 * the value's length, not of the capacity the peer names (up to
 * ENG_DISK_READ_MAX, a gigabyte per request); a value longer than the
 * capacity is BUFFER_OVERFLOW and an absent one OBJECT_NOT_FOUND, neither
 * read; an engine given a disk_read callback without disk_length is
 * refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "engine/engine.h"
#include "lunar.h"
#include "tests/unit/test_engine_util.h"
#include "tests/unit/test_fill.h"
#include "tests/cmocka_main.h"

#define SEG_SIZE (1u << 20)
#define VAL_LEN	 1000

/* The owner's disk tier: one value under ("t", "k"). */
struct tier {
	unsigned char val[VAL_LEN];
	atomic_ullong reads;	/* disk_read calls */
	atomic_ullong most_cap; /* the largest buffer disk_read was given */
};

static int64_t tier_length(void *arg, const char *tenant, const char *key)
{
	(void)arg;
	return strcmp(tenant, "t") || strcmp(key, "k") ? LUNAR_ERR_OBJECT_NOT_FOUND : VAL_LEN;
}

static int64_t tier_read(void *arg, const char *tenant, const char *key, const struct iovec *iov,
			 int iovcnt)
{
	struct tier *t = arg;
	uint64_t cap = 0;

	atomic_fetch_add(&t->reads, 1);
	for (int i = 0; i < iovcnt; i++)
		cap += iov[i].iov_len;
	if (cap > atomic_load(&t->most_cap))
		atomic_store(&t->most_cap, cap);
	if (tier_length(arg, tenant, key) < 0)
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	if (iovcnt != 1 || iov[0].iov_len < VAL_LEN)
		return LUNAR_ERR_BUFFER_OVERFLOW;
	memcpy(iov[0].iov_base, t->val, VAL_LEN);
	return VAL_LEN;
}

static struct node owner_start(struct tier *t)
{
	return node_create((struct eng_config){
	    .host = "127.0.0.1",
	    .seg_size = SEG_SIZE,
	    .io_timeout_ms = 30000,
	    .disk_read = tier_read,
	    .disk_length = tier_length,
	    .disk_arg = t,
	});
}

static void test_engine_disk_owner_buffer_is_the_value(void **state)
{
	static struct tier t;
	struct node a = node_create((struct eng_config){.host = "127.0.0.1", .seg_size = SEG_SIZE});
	struct node b = owner_start(&t);
	/* A capacity of ENG_DISK_READ_MAX: 1024 pieces of one 1 MiB buffer. */
	enum { PIECES = 1024 };
	struct iovec *v = calloc(PIECES, sizeof(*v));
	unsigned char *dst = malloc(1u << 20);
	uint32_t crc = 0;

	(void)state;
	assert_non_null(v);
	assert_non_null(dst);
	test_fill(t.val, VAL_LEN, 7);
	for (int i = 0; i < PIECES; i++)
		v[i] = (struct iovec){dst, 1u << 20};
	assert_int_equal(
	    eng_xfer_disk(a.e, eng_engine_endpoint(b.e), "t", "k", v, PIECES, NULL, &crc), VAL_LEN);
	assert_memory_equal(dst, t.val, VAL_LEN);
	assert_int_equal(crc, lc_crc32c(0, t.val, VAL_LEN));
	printf("  the owner read into %llu bytes for a capacity of %llu\n",
	       (unsigned long long)atomic_load(&t.most_cap), (unsigned long long)PIECES << 20);
	assert_int_equal(atomic_load(&t.most_cap), VAL_LEN);
	free(v);
	free(dst);
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_disk_short_capacity_and_absent_not_read(void **state)
{
	static struct tier t;
	struct node a = node_create((struct eng_config){.host = "127.0.0.1", .seg_size = SEG_SIZE});
	struct node b = owner_start(&t);
	const char *ep = eng_engine_endpoint(b.e);
	unsigned char dst[VAL_LEN];
	struct iovec v = {dst, VAL_LEN - 1};

	(void)state;
	assert_int_equal(eng_xfer_disk(a.e, ep, "t", "k", &v, 1, NULL, NULL),
			 LUNAR_ERR_BUFFER_OVERFLOW);
	v.iov_len = VAL_LEN;
	assert_int_equal(eng_xfer_disk(a.e, ep, "t", "nope", &v, 1, NULL, NULL),
			 LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(atomic_load(&t.reads), 0);
	assert_int_equal(eng_xfer_disk(a.e, ep, "t", "k", &v, 1, NULL, NULL), VAL_LEN);
	assert_int_equal(atomic_load(&t.reads), 1);
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_disk_read_needs_length(void **state)
{
	struct eng_config cfg = {.host = "127.0.0.1", .disk_read = tier_read};
	struct eng_engine *e = NULL;

	(void)state;
	assert_int_equal(eng_engine_create(&cfg, &e), LUNAR_ERR_INVALID_PARAMS);
	assert_null(e);
	cfg = (struct eng_config){.host = "127.0.0.1", .disk_length = tier_length};
	assert_int_equal(eng_engine_create(&cfg, &e), LUNAR_ERR_INVALID_PARAMS);
	assert_null(e);
}

LUNAR_TEST_MAIN(NULL, NULL, test_engine_disk_owner_buffer_is_the_value,
		test_engine_disk_short_capacity_and_absent_not_read,
		test_engine_disk_read_needs_length)
