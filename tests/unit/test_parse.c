/*
 * test_parse.c - flag value parsing: sizes with binary suffixes (KB = KiB, as
 * SPEC §10 and Mooncake use them), durations in milliseconds, plain numbers
 * and ratios in [0, 1]. Bad text is -EINVAL and leaves the output alone.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "parse.h"
#include "tests/cmocka_main.h"

#define POISON 0xdeadbeefcafef00dull

static uint64_t size_of(const char *s)
{
	uint64_t v = POISON;

	assert_int_equal(lc_parse_size(s, &v), 0);
	return v;
}

static void size_bad(const char *s)
{
	uint64_t v = POISON;

	assert_int_equal(lc_parse_size(s, &v), -EINVAL);
	assert_true(v == POISON);
}

static uint64_t ms_of(const char *s)
{
	uint64_t v = POISON;

	assert_int_equal(lc_parse_duration_ms(s, &v), 0);
	return v;
}

static void ms_bad(const char *s)
{
	uint64_t v = POISON;

	assert_int_equal(lc_parse_duration_ms(s, &v), -EINVAL);
	assert_true(v == POISON);
}

static void test_parse_size_plain(void **state)
{
	assert_true(size_of("0") == 0);
	assert_true(size_of("512") == 512);
	assert_true(size_of("512B") == 512);
	assert_true(size_of("18446744073709551615") == UINT64_MAX);
}

static void test_parse_size_binary_suffixes(void **state)
{
	assert_true(size_of("4KiB") == 4096);
	assert_true(size_of("64MiB") == 64ull << 20);
	assert_true(size_of("4GiB") == 4ull << 30);
	assert_true(size_of("1TiB") == 1ull << 40);
	assert_true(size_of("0GiB") == 0);
}

static void test_parse_size_decimal_names_are_binary(void **state)
{
	assert_true(size_of("1KB") == 1024);
	assert_true(size_of("64MB") == 64ull << 20);
	assert_true(size_of("4GB") == 4ull << 30);
	assert_true(size_of("2TB") == 2ull << 40);
	assert_true(size_of("8K") == 8192);
	assert_true(size_of("3G") == 3ull << 30);
}

static void test_parse_size_suffix_case(void **state)
{
	assert_true(size_of("4gib") == 4ull << 30);
	assert_true(size_of("16mb") == 16ull << 20);
}

static void test_parse_size_bad_text(void **state)
{
	size_bad("");
	size_bad("abc");
	size_bad("4XB");
	size_bad("-1");
	size_bad("+1");
	size_bad(" 1");
	size_bad("1 GiB");
	size_bad("1GiB ");
	size_bad("1.5GiB");
	size_bad("GiB");
	size_bad("0x10");
	size_bad("4GiBB");
	assert_int_equal(lc_parse_size(NULL, &(uint64_t){0}), -EINVAL);
}

static void test_parse_size_overflow(void **state)
{
	size_bad("99999999999TiB");
	size_bad("16777216TiB"); /* 2^24 TiB = 2^64 bytes */
	size_bad("18446744073709551616");
	size_bad("99999999999999999999999");
	/* The largest that fits. */
	assert_true(size_of("16777215TiB") == 16777215ull << 40);
}

static void test_parse_duration_units(void **state)
{
	assert_true(ms_of("10s") == 10000);
	assert_true(ms_of("250ms") == 250);
	assert_true(ms_of("30m") == 30ull * 60 * 1000);
	assert_true(ms_of("24h") == 24ull * 3600 * 1000);
	assert_true(ms_of("600s") == 600000);
	assert_true(ms_of("0ms") == 0);
}

static void test_parse_duration_bare_is_seconds(void **state)
{
	assert_true(ms_of("5") == 5000);
	assert_true(ms_of("0") == 0);
}

static void test_parse_duration_bad_text(void **state)
{
	ms_bad("");
	ms_bad("s");
	ms_bad("abc");
	ms_bad("10x");
	ms_bad("10sec");
	ms_bad("-5s");
	ms_bad("1.5s");
	ms_bad("10 s");
	ms_bad("99999999999999999999h");
	ms_bad("18446744073709551615s"); /* fits as seconds, not as ms */
	assert_int_equal(lc_parse_duration_ms(NULL, &(uint64_t){0}), -EINVAL);
}

static void test_parse_rpc_url(void **state)
{
	(void)state;
	assert_int_equal(lc_parse_rpc_url("tcp://127.0.0.1:50051"), 0);
	assert_int_equal(lc_parse_rpc_url("tcp://master.example:1"), 0);
	assert_int_equal(lc_parse_rpc_url("tcp://[::1]:50051"), 0);
	assert_int_equal(lc_parse_rpc_url("ipc:///run/lunar/master.ipc"), 0);
	assert_int_equal(lc_parse_rpc_url("etcd://127.0.0.1:2379,127.0.0.1:2479/lunar"), 0);
	assert_int_equal(lc_parse_rpc_url("etcd://127.0.0.1:2379"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("etcd:///lunar"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("etcd://h:2379/"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("127.0.0.1:50051"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("tcp://127.0.0.1"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("tcp://[::1]"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("tcp://:50051"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("tcp://h:0"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("tcp://h:65536"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("tcp://h:port"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url("ipc://"), -EINVAL);
	assert_int_equal(lc_parse_rpc_url(""), -EINVAL);
	assert_int_equal(lc_parse_rpc_url(NULL), -EINVAL);
}

static void test_parse_u64(void **state)
{
	uint64_t v = POISON;

	assert_int_equal(lc_parse_u64("0", &v), 0);
	assert_true(v == 0);
	assert_int_equal(lc_parse_u64("1024", &v), 0);
	assert_true(v == 1024);
	assert_int_equal(lc_parse_u64("18446744073709551615", &v), 0);
	assert_true(v == UINT64_MAX);
	v = POISON;
	assert_int_equal(lc_parse_u64("18446744073709551616", &v), -EINVAL);
	assert_int_equal(lc_parse_u64("", &v), -EINVAL);
	assert_int_equal(lc_parse_u64("-1", &v), -EINVAL);
	assert_int_equal(lc_parse_u64("12k", &v), -EINVAL);
	assert_int_equal(lc_parse_u64(" 1", &v), -EINVAL);
	assert_int_equal(lc_parse_u64(NULL, &v), -EINVAL);
	assert_true(v == POISON);
}

static void test_parse_ratio(void **state)
{
	double v = -1.0;

	assert_int_equal(lc_parse_ratio("0.05", &v), 0);
	assert_true(v > 0.0499999 && v < 0.0500001);
	assert_int_equal(lc_parse_ratio("0.90", &v), 0);
	assert_true(v > 0.8999999 && v < 0.9000001);
	assert_int_equal(lc_parse_ratio("1", &v), 0);
	assert_true(v == 1.0);
	assert_int_equal(lc_parse_ratio("0", &v), 0);
	assert_true(v == 0.0);
}

static void test_parse_ratio_bad_text(void **state)
{
	double v = -1.0;

	assert_int_equal(lc_parse_ratio("1.5", &v), -EINVAL);
	assert_int_equal(lc_parse_ratio("1.0000001", &v), -EINVAL);
	assert_int_equal(lc_parse_ratio("-0.1", &v), -EINVAL);
	assert_int_equal(lc_parse_ratio("", &v), -EINVAL);
	assert_int_equal(lc_parse_ratio("abc", &v), -EINVAL);
	assert_int_equal(lc_parse_ratio("0.5x", &v), -EINVAL);
	assert_int_equal(lc_parse_ratio("nan", &v), -EINVAL);
	assert_int_equal(lc_parse_ratio("inf", &v), -EINVAL);
	assert_int_equal(lc_parse_ratio(NULL, &v), -EINVAL);
	assert_true(v == -1.0);
}

LUNAR_TEST_MAIN(NULL, NULL, test_parse_size_plain, test_parse_size_binary_suffixes,
		test_parse_size_decimal_names_are_binary, test_parse_size_suffix_case,
		test_parse_size_bad_text, test_parse_size_overflow, test_parse_duration_units,
		test_parse_duration_bare_is_seconds, test_parse_duration_bad_text, test_parse_u64,
		test_parse_rpc_url, test_parse_ratio, test_parse_ratio_bad_text)
