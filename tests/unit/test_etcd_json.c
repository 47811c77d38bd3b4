/*
 * test_etcd_json.c - the bounded JSON extractor and base64 codec the etcd
 * client reads gateway replies with (master/etcd_json.c): real etcd replies
 * yield their fields, int64 as strings or digits, and truncated, garbage,
 * too deep or overflowing text is an error code, never a crash.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "etcd/etcd.h"
#include "tests/cmocka_main.h"

/* What etcd 3.4 answers to a range of an existing key. */
static const char range_reply[] =
    "{\"header\":{\"cluster_id\":\"15118495548433857066\",\"revision\":\"2\"},"
    "\"kvs\":[{\"key\":\"L2x1bmFyL2MvbGVhZGVy\",\"create_revision\":\"2\","
    "\"mod_revision\":\"2\",\"version\":\"1\",\"value\":\"dGNwOi8veDox\","
    "\"lease\":\"4111120383747097863\"}],\"count\":\"1\"}";

static int64_t int_at(const char *s, const char *const *path, size_t depth)
{
	int64_t v = -12345;

	assert_int_equal(etcd_json_int(s, strlen(s), path, depth, &v), 0);
	return v;
}

static void test_etcd_json_reads_a_range_reply(void **state)
{
	static const char *const cr[] = {"kvs", "#0", "create_revision"};
	static const char *const lease[] = {"kvs", "#0", "lease"};
	static const char *const val[] = {"kvs", "#0", "value"};
	static const char *const rev[] = {"header", "revision"};
	static const char *const none[] = {"kvs", "#1", "value"};
	const char *v;
	size_t n;
	char out[32];

	(void)state;
	assert_int_equal(int_at(range_reply, cr, 3), 2);
	assert_int_equal(int_at(range_reply, rev, 2), 2);
	assert_true(int_at(range_reply, lease, 3) == 4111120383747097863ll);
	assert_int_equal(etcd_json_find(range_reply, strlen(range_reply), val, 3, &v, &n), 0);
	assert_int_equal(n, strlen("\"dGNwOi8veDox\""));
	assert_int_equal(etcd_b64_decode(v + 1, n - 2, out, sizeof(out)), 9);
	assert_memory_equal(out, "tcp://x:1", 9);
	assert_int_equal(etcd_json_find(range_reply, strlen(range_reply), none, 3, &v, &n),
			 -ENOENT);
}

static void test_etcd_json_numbers_and_bools(void **state)
{
	static const char *const a[] = {"a"}, *const b[] = {"b"}, *const c[] = {"c"};
	const char *s = "{\"a\": 42, \"b\": \"-7\", \"c\": true, \"d\": \"x\\\"y\"}";
	const char *big = "{\"a\":\"9223372036854775808\"}", *neg = "{\"a\":\"-\"}";
	int64_t v;

	(void)state;
	assert_int_equal(int_at(s, a, 1), 42);
	assert_int_equal(int_at(s, b, 1), -7);
	assert_int_equal(etcd_json_bool(s, strlen(s), c, 1), 1);
	assert_int_equal(etcd_json_bool(s, strlen(s), (const char *const[]){"zz"}, 1), 0);
	assert_int_equal(etcd_json_bool(s, strlen(s), a, 1), -EPROTO);
	assert_int_equal(etcd_json_int(s, strlen(s), c, 1, &v), -EPROTO);
	assert_int_equal(etcd_json_int(big, strlen(big), a, 1, &v), -EPROTO);
	assert_int_equal(etcd_json_int(neg, strlen(neg), a, 1, &v), -EPROTO);
}

/* Every prefix of a real reply, and every one-byte corruption of it, gives a
 * value or an error code; none reads past the end (run under ASan). */
static void test_etcd_json_truncated_and_corrupt_text(void **state)
{
	static const char *const cr[] = {"kvs", "#0", "create_revision"};
	size_t len = strlen(range_reply);
	char *copy = malloc(len);
	int64_t v;

	(void)state;
	assert_non_null(copy);
	for (size_t cut = 0; cut < len; cut++) {
		memcpy(copy, range_reply, cut);
		assert_true(etcd_json_int(copy, cut, cr, 3, &v) < 0);
	}
	for (size_t i = 0; i < len; i++) {
		for (int c = 0; c < 256; c += 17) {
			memcpy(copy, range_reply, len);
			copy[i] = (char)c;
			(void)etcd_json_int(copy, len, cr, 3, &v);
		}
	}
	free(copy);
}

static void test_etcd_json_depth_is_capped(void **state)
{
	static const char *const a[] = {"a"};
	char deep[4096];
	const char *v;
	size_t n, i;

	(void)state;
	strcpy(deep, "{\"a\":");
	for (i = strlen(deep); i < 2000; i++)
		deep[i] = '[';
	deep[i] = '\0';
	assert_int_equal(etcd_json_find(deep, strlen(deep), a, 1, &v, &n), -EPROTO);
}

static void test_etcd_json_base64_round_trip(void **state)
{
	char enc[64], dec[64];

	(void)state;
	for (size_t n = 0; n <= 20; n++) {
		const char *src = "/lunar/cluster/leader";
		int e = etcd_b64_encode(src, n, enc, sizeof(enc));

		assert_int_equal(e, (int)((n + 2) / 3 * 4));
		assert_int_equal(etcd_b64_decode(enc, (size_t)e, dec, sizeof(dec)), (int)n);
		assert_memory_equal(dec, src, n);
	}
	assert_string_equal((etcd_b64_encode("foo", 3, enc, sizeof(enc)), enc), "Zm9v");
	assert_int_equal(etcd_b64_decode("Zm9", 3, dec, sizeof(dec)), -EPROTO);
	assert_int_equal(etcd_b64_decode("Z=9v", 4, dec, sizeof(dec)), -EPROTO);
	assert_int_equal(etcd_b64_decode("Zm9v", 4, dec, 2), -ENOSPC);
	assert_int_equal(etcd_b64_encode("foo", 3, enc, 4), -ENOSPC);
}

LUNAR_TEST_MAIN(NULL, NULL, test_etcd_json_reads_a_range_reply, test_etcd_json_numbers_and_bools,
		test_etcd_json_truncated_and_corrupt_text, test_etcd_json_depth_is_capped,
		test_etcd_json_base64_round_trip)
