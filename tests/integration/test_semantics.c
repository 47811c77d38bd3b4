/*
 * test_semantics.c - the object semantics of SPEC §3 and §4 as an application
 * sees them through liblunar, against one lunar-proxy with an embedded master
 * and a small (16 MiB) segment: first value wins, error codes for bad keys,
 * sizes and buffers, back-pressure when the store is full, removal, leases,
 * scatter lists and index-aligned batches.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define MIB (1024u * 1024u)

static char sock[PATH_MAX];
static struct lunar_client *cl;

static int setup(void **state)
{
	(void)state;
	return h_embedded_node(sock, &cl, "--segment-size", "16MiB", NULL) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	h_embedded_node_stop(&cl);
	return 0;
}

/* Puts len bytes of key's pattern; returns lunar_put's code. */
static int put_pattern(const char *key, size_t len, const struct lunar_put_cfg *cfg)
{
	return h_put_seeded(cl, key, len, h_seed(key), cfg);
}

/* Reads key and checks it holds len bytes of the pattern of seed_key. */
static void expect_pattern(const char *key, size_t len, const char *seed_key)
{
	h_expect_seeded(cl, key, len, h_seed(seed_key));
}

static char *long_key(size_t len)
{
	char *k = malloc(len + 1);

	H_ASSERT(k != NULL);
	memset(k, 'k', len);
	k[len] = '\0';
	return k;
}

static void test_semantics_put_existing_keeps_first(void **state)
{
	const char *key = "sem/dup";
	uint8_t *second = malloc(2000);

	(void)state;
	H_ASSERT(second != NULL);
	H_ASSERT_EQ(put_pattern(key, 1000, NULL), 0);
	h_fill(second, 2000, h_seed("sem/other"));
	H_ASSERT_EQ(lunar_put(cl, key, second, 2000, NULL), 0);
	H_ASSERT_EQ(lunar_get_size(cl, key), 1000);
	expect_pattern(key, 1000, key);
	free(second);
}

static void test_semantics_get_missing_not_found(void **state)
{
	char buf[64];

	(void)state;
	H_ASSERT_EQ(lunar_get_into(cl, "sem/missing", buf, sizeof(buf)),
		    LUNAR_ERR_OBJECT_NOT_FOUND);
	H_ASSERT_EQ(lunar_get_size(cl, "sem/missing"), LUNAR_ERR_OBJECT_NOT_FOUND);
	H_ASSERT_EQ(lunar_exists(cl, "sem/missing"), 0);
}

static void test_semantics_invalid_keys(void **state)
{
	char buf[64] = "value";
	char *k4096 = long_key(LUNAR_KEY_MAX);
	char *k4097 = long_key(LUNAR_KEY_MAX + 1);

	(void)state;
	H_ASSERT_EQ(lunar_put(cl, "", buf, sizeof(buf), NULL), LUNAR_ERR_INVALID_KEY);
	H_ASSERT_EQ(lunar_get_into(cl, "", buf, sizeof(buf)), LUNAR_ERR_INVALID_KEY);
	H_ASSERT_EQ(lunar_put(cl, k4097, buf, sizeof(buf), NULL), LUNAR_ERR_INVALID_KEY);
	H_ASSERT_EQ(lunar_get_into(cl, k4097, buf, sizeof(buf)), LUNAR_ERR_INVALID_KEY);
	H_ASSERT_EQ(lunar_put(cl, "sem/bad\nkey", buf, sizeof(buf), NULL), LUNAR_ERR_INVALID_KEY);
	/* The longest legal key works end to end. */
	H_ASSERT_EQ(put_pattern(k4096, 3000, NULL), 0);
	expect_pattern(k4096, 3000, k4096);
	free(k4096);
	free(k4097);
}

static void test_semantics_zero_size_invalid_params(void **state)
{
	char buf[8] = {0};

	(void)state;
	H_ASSERT_EQ(lunar_put(cl, "sem/empty", buf, 0, NULL), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(lunar_exists(cl, "sem/empty"), 0);
}

static void test_semantics_small_buffer_overflow(void **state)
{
	const char *key = "sem/overflow";
	char *buf = malloc(10000);

	(void)state;
	H_ASSERT(buf != NULL);
	H_ASSERT_EQ(put_pattern(key, 10000, NULL), 0);
	H_ASSERT_EQ(lunar_get_into(cl, key, buf, 9999), LUNAR_ERR_BUFFER_OVERFLOW);
	H_ASSERT_EQ(lunar_get_into(cl, key, buf, 1), LUNAR_ERR_BUFFER_OVERFLOW);
	/* The exact size fits. */
	H_ASSERT_EQ(lunar_get_into(cl, key, buf, 10000), 10000);
	H_ASSERT(h_verify(buf, 10000, h_seed(key)) < 0);
	free(buf);
}

static void test_semantics_remove_then_get_not_found(void **state)
{
	const char *key = "sem/remove";
	char buf[4096];

	(void)state;
	H_ASSERT_EQ(put_pattern(key, sizeof(buf), NULL), 0);
	/* Never read, so never leased: a plain remove works. */
	H_ASSERT_EQ(lunar_remove(cl, key, 0), 0);
	H_ASSERT_EQ(lunar_get_into(cl, key, buf, sizeof(buf)), LUNAR_ERR_OBJECT_NOT_FOUND);
	H_ASSERT_EQ(lunar_exists(cl, key), 0);
	H_ASSERT_EQ(lunar_remove(cl, key, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
}

static void test_semantics_leased_remove_needs_force(void **state)
{
	const char *key = "sem/leased";

	(void)state;
	H_ASSERT_EQ(put_pattern(key, 4096, NULL), 0);
	H_ASSERT_EQ(lunar_exists(cl, key), 1); /* grants a read lease */
	H_ASSERT_EQ(lunar_remove(cl, key, 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	H_ASSERT_EQ(lunar_exists(cl, key), 1);
	H_ASSERT_EQ(lunar_remove(cl, key, 1), 0);
	H_ASSERT_EQ(lunar_exists(cl, key), 0);
}

static void test_semantics_putv_getv_roundtrip(void **state)
{
	static const size_t put_parts[] = {1, 4095, 65536, 123457, 7};
	static const size_t get_parts[] = {100000, 3, 93000, 93};
	const char *key = "sem/vec";
	struct iovec piov[5], giov[4];
	size_t total = 0, gtotal = 0, off = 0;
	uint8_t *src, *dst;

	(void)state;
	for (int i = 0; i < 5; i++)
		total += put_parts[i];
	for (int i = 0; i < 4; i++)
		gtotal += get_parts[i];
	H_ASSERT(gtotal == total);
	src = malloc(total);
	dst = calloc(1, total);
	H_ASSERT(src && dst);
	h_fill(src, total, h_seed(key));
	/* Separate buffers per part, so the library must gather, not assume one. */
	for (int i = 0; i < 5; i++) {
		piov[i].iov_base = malloc(put_parts[i]);
		H_ASSERT(piov[i].iov_base != NULL);
		memcpy(piov[i].iov_base, src + off, put_parts[i]);
		piov[i].iov_len = put_parts[i];
		off += put_parts[i];
	}
	H_ASSERT_EQ(lunar_putv(cl, key, piov, 5, NULL), 0);
	H_ASSERT_EQ(lunar_get_size(cl, key), total);
	off = 0;
	for (int i = 0; i < 4; i++) {
		giov[i].iov_base = malloc(get_parts[i]);
		H_ASSERT(giov[i].iov_base != NULL);
		giov[i].iov_len = get_parts[i];
	}
	H_ASSERT_EQ(lunar_getv(cl, key, giov, 4), total);
	for (int i = 0; i < 4; i++) {
		memcpy(dst + off, giov[i].iov_base, get_parts[i]);
		off += get_parts[i];
		free(giov[i].iov_base);
	}
	H_ASSERT_MSG(h_verify(dst, total, h_seed(key)) < 0, "getv bytes differ from putv bytes");
	/* A plain get sees the same single object. */
	expect_pattern(key, total, key);
	for (int i = 0; i < 5; i++)
		free(piov[i].iov_base);
	free(src);
	free(dst);
}

static void test_semantics_batch_bad_key_in_middle(void **state)
{
	static const size_t lens[3] = {5000, 64, 70001};
	char *bad = long_key(LUNAR_KEY_MAX + 1);
	const char *keys[3] = {"sem/batch0", bad, "sem/batch2"};
	struct iovec iov[3], giov[3];
	const struct iovec *iovs[3] = {&iov[0], &iov[1], &iov[2]};
	const struct iovec *giovs[3] = {&giov[0], &giov[1], &giov[2]};
	const int cnts[3] = {1, 1, 1};
	int results[3] = {99, 99, 99};
	int64_t gresults[3] = {99, 99, 99};

	(void)state;
	for (int i = 0; i < 3; i++) {
		iov[i].iov_base = malloc(lens[i]);
		giov[i].iov_base = calloc(1, lens[i]);
		H_ASSERT(iov[i].iov_base && giov[i].iov_base);
		iov[i].iov_len = giov[i].iov_len = lens[i];
		h_fill(iov[i].iov_base, lens[i], h_seed(i == 1 ? "bad" : keys[i]));
	}
	H_ASSERT_EQ(lunar_batch_put(cl, 3, keys, iovs, cnts, NULL, results), 0);
	H_ASSERT_EQ(results[0], 0);
	H_ASSERT_EQ(results[1], LUNAR_ERR_INVALID_KEY);
	H_ASSERT_EQ(results[2], 0);
	H_ASSERT_EQ(lunar_batch_get_into(cl, 3, keys, giovs, cnts, gresults), 0);
	H_ASSERT_EQ(gresults[0], lens[0]);
	H_ASSERT_EQ(gresults[1], LUNAR_ERR_INVALID_KEY);
	H_ASSERT_EQ(gresults[2], lens[2]);
	H_ASSERT(h_verify(giov[0].iov_base, lens[0], h_seed(keys[0])) < 0);
	H_ASSERT(h_verify(giov[2].iov_base, lens[2], h_seed(keys[2])) < 0);
	for (int i = 0; i < 3; i++) {
		free(iov[i].iov_base);
		free(giov[i].iov_base);
	}
	free(bad);
}

/*
 * A batch of malloc'd values that each fit the shared arena but together do
 * not (a 1 MiB arena, 8 x 200 KiB) still stages: the arguments are valid,
 * so the call returns 0 with every key stored and read back.
 */
static void test_semantics_batch_larger_than_arena(void **state)
{
	enum { N = 8, LEN = 200 * 1024 };
	const struct lunar_opts opts = {
	    .socket_path = sock, .timeout_ms = H_CLIENT_TIMEOUT_MS, .arena_bytes = MIB};
	struct lunar_client *small;
	char names[N][32];
	const char *keys[N];
	struct iovec iov[N];
	const struct iovec *iovs[N];
	int cnts[N], results[N];
	int64_t gresults[N];

	(void)state;
	H_ASSERT_EQ(lunar_connect(&opts, &small), 0);
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "sem/arena%d", i);
		keys[i] = names[i];
		iov[i].iov_base = malloc(LEN);
		H_ASSERT(iov[i].iov_base != NULL);
		iov[i].iov_len = LEN;
		iovs[i] = &iov[i];
		cnts[i] = 1;
		h_fill(iov[i].iov_base, LEN, h_seed(keys[i]));
	}
	H_ASSERT_EQ(lunar_batch_put(small, N, keys, iovs, cnts, NULL, results), 0);
	for (int i = 0; i < N; i++)
		H_ASSERT_EQ(results[i], 0);
	for (int i = 0; i < N; i++)
		memset(iov[i].iov_base, 0, LEN);
	H_ASSERT_EQ(lunar_batch_get_into(small, N, keys, iovs, cnts, gresults), 0);
	for (int i = 0; i < N; i++) {
		H_ASSERT_EQ(gresults[i], LEN);
		H_ASSERT(h_verify(iov[i].iov_base, LEN, h_seed(keys[i])) < 0);
		free(iov[i].iov_base);
	}
	lunar_close(small);
}

/*
 * A value larger than the whole arena (3 MiB on a 1 MiB arena) from and
 * into malloc'd memory: staged buffers always work (SPEC 4), so the put,
 * a get into a larger buffer, a scattered get and a short buffer all give
 * what they would with a large arena.
 */
static void test_semantics_value_larger_than_arena(void **state)
{
	enum { LEN = 3 * MIB };
	const struct lunar_opts opts = {
	    .socket_path = sock, .timeout_ms = H_CLIENT_TIMEOUT_MS, .arena_bytes = MIB};
	const char *key = "sem/huge";
	struct lunar_client *small;
	uint8_t *src = malloc(LEN), *dst = malloc(LEN + MIB);
	struct iovec giov[3];

	(void)state;
	H_ASSERT(src && dst);
	H_ASSERT_EQ(lunar_connect(&opts, &small), 0);
	h_fill(src, LEN, h_seed(key));
	H_ASSERT_EQ(lunar_put(small, key, src, LEN, NULL), 0);
	H_ASSERT_EQ(lunar_get_size(small, key), LEN);
	memset(dst, 0, LEN + MIB);
	H_ASSERT_EQ(lunar_get_into(small, key, dst, LEN + MIB), LEN);
	H_ASSERT(h_verify(dst, LEN, h_seed(key)) < 0);
	/* Scattered: MIB, 0, the rest plus room to spare. */
	memset(dst, 0, LEN + MIB);
	giov[0] = (struct iovec){dst, MIB};
	giov[1] = (struct iovec){NULL, 0};
	giov[2] = (struct iovec){dst + MIB, LEN};
	H_ASSERT_EQ(lunar_getv(small, key, giov, 3), LEN);
	H_ASSERT(h_verify(dst, LEN, h_seed(key)) < 0);
	H_ASSERT_EQ(lunar_get_into(small, key, dst, LEN - 1), LUNAR_ERR_BUFFER_OVERFLOW);
	lunar_close(small);
	free(src);
	free(dst);
}

/* Keys alone can outgrow a 1 MiB arena: 300 keys of 4000 bytes. A prefix
 * match over them still counts across the whole list. */
static void test_semantics_prefix_match_larger_than_arena(void **state)
{
	enum { N = 300, KLEN = 4000, GAP = 200 };
	const struct lunar_opts opts = {
	    .socket_path = sock, .timeout_ms = H_CLIENT_TIMEOUT_MS, .arena_bytes = MIB};
	struct lunar_client *small;
	const char *keys[N];
	uint64_t vals[N];
	struct iovec iov[N];
	const struct iovec *iovs[N];
	int cnts[N], results[N];

	(void)state;
	H_ASSERT_EQ(lunar_connect(&opts, &small), 0);
	for (unsigned i = 0; i < N; i++) {
		char *k = long_key(KLEN);

		snprintf(k, 16, "sem/pm%04u", i % 10000);
		k[10] = '-';
		keys[i] = k;
		vals[i] = (uint64_t)i;
		iov[i] = (struct iovec){&vals[i], sizeof(vals[i])};
		iovs[i] = &iov[i];
		cnts[i] = 1;
	}
	/* Every key but GAP is stored. */
	H_ASSERT_EQ(lunar_batch_put(small, GAP, keys, iovs, cnts, NULL, results), 0);
	H_ASSERT_EQ(lunar_batch_put(small, N - GAP - 1, keys + GAP + 1, iovs, cnts, NULL, results),
		    0);
	H_ASSERT_EQ(lunar_prefix_match(small, N, keys), GAP);
	H_ASSERT_EQ(lunar_batch_exists(small, N, keys, results), 0);
	for (int i = 0; i < N; i++)
		H_ASSERT_EQ(results[i], i != GAP);
	for (int i = 0; i < N; i++)
		free((char *)keys[i]);
	lunar_close(small);
}

static void test_semantics_remove_all_counts(void **state)
{
	char key[64];
	int64_t n;

	(void)state;
	n = lunar_remove_all(cl, 1); /* whatever earlier cases left */
	H_ASSERT_MSG(n >= 0, "remove_all(force) = %lld (%s)", (long long)n, h_code(n));
	for (int i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "sem/all%d", i);
		H_ASSERT_EQ(put_pattern(key, 1000 + (size_t)i, NULL), 0);
	}
	/* Two of them read, so leased: an unforced remove_all skips them. */
	H_ASSERT_EQ(lunar_exists(cl, "sem/all0"), 1);
	H_ASSERT_EQ(lunar_exists(cl, "sem/all1"), 1);
	H_ASSERT_EQ(lunar_remove_all(cl, 0), 3);
	H_ASSERT_EQ(lunar_exists(cl, "sem/all0"), 1);
	H_ASSERT_EQ(lunar_exists(cl, "sem/all4"), 0);
	H_ASSERT_EQ(lunar_remove_all(cl, 1), 2);
	H_ASSERT_EQ(lunar_exists(cl, "sem/all0"), 0);
	H_ASSERT_EQ(lunar_remove_all(cl, 1), 0);
}

/*
 * Fill the 16 MiB segment with 1 MiB objects until a put fails; that failure
 * must be the back-pressure code. The objects are hard-pinned and leased so
 * eviction cannot make room behind the test's back.
 */
static void test_semantics_store_full_no_available_handle(void **state)
{
	const struct lunar_put_cfg pinned = {.replica_num = 1, .hard_pin = 1};
	int rc = 0, stored = 0;
	uint64_t deadline;
	char key[64];

	(void)state;
	for (int i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), "sem/fill%d", i);
		rc = put_pattern(key, MIB, &pinned);
		if (rc != 0)
			break;
		stored++;
		H_ASSERT_EQ(lunar_exists(cl, key), 1);
	}
	H_ASSERT_MSG(rc != 0, "64 MiB of puts all fit in a 16 MiB segment");
	H_ASSERT_EQ(rc, LUNAR_ERR_NO_AVAILABLE_HANDLE);
	/* full, not too large: the proxy says nothing beyond the code */
	H_ASSERT_MSG(!*lunar_error_detail(), "detail: \"%s\"", lunar_error_detail());
	H_ASSERT_MSG(stored >= 8, "only %d MiB fit in a 16 MiB segment", stored);
	/* Everything stored is still intact. */
	for (int i = 0; i < stored; i++) {
		snprintf(key, sizeof(key), "sem/fill%d", i);
		expect_pattern(key, MIB, key);
	}
	H_ASSERT(lunar_remove_all(cl, 1) >= stored);
	/* Room again once removed (allow the free a moment). */
	deadline = h_now_ms() + 2000;
	do {
		rc = put_pattern("sem/after-full", MIB, NULL);
		if (rc != LUNAR_ERR_NO_AVAILABLE_HANDLE)
			break;
		h_sleep_ms(50);
	} while (h_now_ms() < deadline);
	H_ASSERT_EQ(rc, 0);
	expect_pattern("sem/after-full", MIB, "sem/after-full");
}

/*
 * A value larger than every segment (17 MiB, the only one holds 16 MiB):
 * NO_AVAILABLE_HANDLE as Mooncake says (engines act on the code), and
 * lunar_error_detail says why, with the largest segment's size, until the
 * thread's next call.
 */
static void test_semantics_value_larger_than_every_segment_says_why(void **state)
{
	(void)state;
	H_ASSERT_EQ(put_pattern("sem/too-big", 17 * MIB, NULL), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	H_ASSERT_MSG(strstr(lunar_error_detail(), "larger than every segment") &&
			 strstr(lunar_error_detail(), "the largest holds 16777216 bytes"),
		     "detail: \"%s\"", lunar_error_detail());
	H_ASSERT_EQ(lunar_exists(cl, "sem/too-big"), 0);
	H_ASSERT_MSG(!*lunar_error_detail(), "detail: \"%s\"", lunar_error_detail());
}

LUNAR_TEST_MAIN(setup, teardown, test_semantics_put_existing_keeps_first,
		test_semantics_get_missing_not_found, test_semantics_invalid_keys,
		test_semantics_zero_size_invalid_params, test_semantics_small_buffer_overflow,
		test_semantics_remove_then_get_not_found, test_semantics_leased_remove_needs_force,
		test_semantics_putv_getv_roundtrip, test_semantics_batch_bad_key_in_middle,
		test_semantics_batch_larger_than_arena,
		test_semantics_prefix_match_larger_than_arena,
		test_semantics_value_larger_than_arena,
		test_semantics_value_larger_than_every_segment_says_why,
		test_semantics_remove_all_counts, test_semantics_store_full_no_available_handle)
