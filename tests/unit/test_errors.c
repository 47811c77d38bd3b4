/*
 * test_errors.c - the public error codes keep SPEC §9's numbers, and
 * lunar_strerror names each one with SPEC §9's name, never NULL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lunar.h"
#include "tests/cmocka_main.h"

struct code_name {
	int code;
	int spec; /* the number SPEC §9 gives */
	const char *name;
};

static const struct code_name codes[] = {
    {LUNAR_OK, 0, "OK"},
    {LUNAR_ERR_INTERNAL, -1, "INTERNAL_ERROR"},
    {LUNAR_ERR_BUFFER_OVERFLOW, -10, "BUFFER_OVERFLOW"},
    {LUNAR_ERR_SEGMENT_NOT_FOUND, -101, "SEGMENT_NOT_FOUND"},
    {LUNAR_ERR_SEGMENT_ALREADY_EXISTS, -102, "SEGMENT_ALREADY_EXISTS"},
    {LUNAR_ERR_NO_AVAILABLE_HANDLE, -200, "NO_AVAILABLE_HANDLE"},
    {LUNAR_ERR_INVALID_KEY, -400, "INVALID_KEY"},
    {LUNAR_ERR_INVALID_PARAMS, -600, "INVALID_PARAMS"},
    {LUNAR_ERR_ILLEGAL_CLIENT, -601, "ILLEGAL_CLIENT"},
    {LUNAR_ERR_REPLICA_IS_NOT_READY, -703, "REPLICA_IS_NOT_READY"},
    {LUNAR_ERR_OBJECT_NOT_FOUND, -704, "OBJECT_NOT_FOUND"},
    {LUNAR_ERR_OBJECT_ALREADY_EXISTS, -705, "OBJECT_ALREADY_EXISTS"},
    {LUNAR_ERR_OBJECT_HAS_LEASE, -706, "OBJECT_HAS_LEASE"},
    {LUNAR_ERR_LEASE_EXPIRED, -707, "LEASE_EXPIRED"},
    {LUNAR_ERR_TRANSFER_FAIL, -800, "TRANSFER_FAIL"},
    {LUNAR_ERR_CHECKSUM_MISMATCH, -801, "CHECKSUM_MISMATCH"},
    {LUNAR_ERR_RPC_FAIL, -900, "RPC_FAIL"},
    {LUNAR_ERR_RPC_TIMEOUT, -901, "RPC_TIMEOUT"},
    {LUNAR_ERR_ETCD_OPERATION, -1000, "ETCD_OPERATION_ERROR"},
    {LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS, -1010, "UNAVAILABLE_IN_CURRENT_STATUS"},
    {LUNAR_ERR_FILE_READ_FAIL, -1102, "FILE_READ_FAIL"},
    {LUNAR_ERR_FILE_WRITE_FAIL, -1103, "FILE_WRITE_FAIL"},
    {LUNAR_ERR_TENANT_QUOTA_EXCEEDED, -1700, "TENANT_QUOTA_EXCEEDED"},
    {LUNAR_ERR_PROXY_UNAVAILABLE, -2000, "PROXY_UNAVAILABLE"},
    {LUNAR_ERR_UNAUTHORIZED, -2001, "UNAUTHORIZED"},
    {LUNAR_ERR_TOO_MANY_CLIENTS, -2002, "TOO_MANY_CLIENTS"},
    {LUNAR_ERR_PROTOCOL, -2003, "PROTOCOL_ERROR"},
    {LUNAR_ERR_VERSION_MISMATCH, -2004, "VERSION_MISMATCH"},
    {LUNAR_ERR_BUSY, -2005, "BUSY"},
};

#define NCODES (sizeof(codes) / sizeof(codes[0]))

static int is_known(int code)
{
	for (size_t i = 0; i < NCODES; i++)
		if (codes[i].code == code)
			return 1;
	return 0;
}

static void test_errors_spec_numbers(void **state)
{
	for (size_t i = 0; i < NCODES; i++)
		assert_int_equal(codes[i].code, codes[i].spec);
	/* The back-pressure signal engines act on: SPEC §9 asks to keep it exact. */
	assert_int_equal(LUNAR_ERR_NO_AVAILABLE_HANDLE, -200);
	assert_int_equal(LUNAR_ERR_BUSY, -2005);
}

static void test_errors_spec_names(void **state)
{
	for (size_t i = 0; i < NCODES; i++) {
		const char *s = lunar_strerror(codes[i].code);

		assert_non_null(s);
		assert_string_equal(s, codes[i].name);
	}
	assert_string_equal(lunar_strerror(-200), "NO_AVAILABLE_HANDLE");
	assert_string_equal(lunar_strerror(-2005), "BUSY");
}

static void test_errors_names_distinct(void **state)
{
	for (size_t i = 0; i < NCODES; i++)
		for (size_t j = i + 1; j < NCODES; j++) {
			assert_int_not_equal(codes[i].code, codes[j].code);
			assert_string_not_equal(lunar_strerror(codes[i].code),
						lunar_strerror(codes[j].code));
		}
}

static void test_errors_unknown(void **state)
{
	static const int unknown[] = {1,     2,	    -2,	   -9,	  -11,	-100,	   -103,     -201,
				      -399,  -401,  -602,  -702,  -708, -902,	   -1001,    -1101,
				      -1104, -1701, -1999, -2006, 77,	INT32_MAX, INT32_MIN};

	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		assert_false(is_known(unknown[i]));
		assert_non_null(lunar_strerror(unknown[i]));
		assert_string_equal(lunar_strerror(unknown[i]), "UNKNOWN_ERROR");
	}
}

static void test_errors_never_null(void **state)
{
	for (int code = -3000; code <= 100; code++) {
		const char *s = lunar_strerror(code);

		assert_non_null(s);
		assert_true(s[0] != '\0');
		if (!is_known(code))
			assert_string_equal(s, "UNKNOWN_ERROR");
	}
}

LUNAR_TEST_MAIN(NULL, NULL, test_errors_spec_numbers, test_errors_spec_names,
		test_errors_names_distinct, test_errors_unknown, test_errors_never_null)
