/*
 * test_client_crc.c - a put's CRC32C may come from liblunar: with
 * LC_SQE_SEG_CRC each staged piece carries the CRC32C liblunar took in its
 * staging copy, and the proxy sends that rather than reading the bytes once
 * more. It is the client's word. On a keyed cluster the owner checks the
 * bytes against it, so a put whose claim is wrong fails and its key stays
 * a miss; keyless, nothing checks it on the way, and a reader gets
 * CHECKSUM_MISMATCH, never the bytes. Either way the same bytes put with
 * the right claim, and liblunar's own puts, read back exact. A registered
 * value, which liblunar does not copy, sent in one slice, has its CRC32C
 * taken by A before its write, so its commit still travels beside it; one
 * B copies into its own segment is committed after. One lunar-master;
 * proxy A has no segment (the raw client is A's), B has one, so every
 * value crosses B's data port.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "harness.h"
#include "harness_raw.h"
#include "http_get.h"
#include "tests/cmocka_main.h"

#define VAL_LEN	   100003u /* not a multiple of a line: the claim covers every byte */
#define CRC_REJECT "lunar_proxy_data_rejected_total{reason=\"crc\"}"
#define BESIDE	   "lunar_proxy_puts_beside_total"
#define BIG_LEN	   (256u << 10) /* past the 64 KiB A took itself before; one slice */

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_b[H_SEG_NAME];
static struct h_proc *proxy_a, *proxy_b;
static uint8_t val[VAL_LEN], out[VAL_LEN];

static int keyed_setup(void **state)
{
	(void)state;
	return h_remote_pair(sock_a, sock_b, seg_b, &proxy_a, &proxy_b);
}

static int keyless_setup(void **state)
{
	(void)state;
	h_keyless();
	return h_remote_pair(sock_a, sock_b, seg_b, &proxy_a, &proxy_b);
}

static int teardown(void **state)
{
	(void)state;
	h_stop(proxy_a);
	h_stop(proxy_b);
	h_cleanup();
	return 0;
}

/* Put val as key through raw client c, its one piece claimed to have the
 * CRC32C crc; the key's code. */
static int64_t put_claimed(struct raw *c, const char *key, uint32_t crc)
{
	struct lc_seg seg = {.region = 0, .crc = crc, .len = VAL_LEN};
	struct lc_item it = {.key_len = (uint32_t)strlen(key), .nseg = 1};
	struct lc_sqe q = {.op = LC_OP_PUT,
			   .flags = LC_SQE_SEG_CRC,
			   .slot = 1,
			   .count = 1,
			   .seq = 9,
			   .replica_num = 1};
	int64_t code;

	seg.off = raw_put(c, val, VAL_LEN);
	it.key_off = raw_put(c, key, it.key_len);
	it.seg_off = raw_put(c, &seg, sizeof(seg));
	q.arg_len = sizeof(it);
	q.arg_off = raw_put(c, &it, sizeof(it));
	if ((code = raw_call(c, &q, H_BOUND_MS(15000))) < 0)
		return code;
	memcpy(&it, c->base + q.arg_off, sizeof(it));
	return it.result;
}

/* A wrong claim and a right one through a raw client on A; the wrong
 * one's put code. The right one, and a liblunar put, read back exact. */
static int64_t claims(void)
{
	uint32_t crc = lc_crc32c(0, val, VAL_LEN);
	struct lunar_client *ca;
	struct raw c;
	int64_t wrong;

	raw_open(&c, sock_a);
	/* A's puts all go to B; its gets tell what landed */
	H_ASSERT_EQ(c.welcome_flags, LC_WELCOME_SEG_CRC | LC_WELCOME_LANDED);
	wrong = put_claimed(&c, "claimed/wrong", crc ^ 1);
	H_ASSERT_EQ(put_claimed(&c, "claimed/right", crc), 0);
	raw_close(&c);
	ca = h_client(sock_a);
	H_ASSERT_EQ(lunar_put(ca, "claimed/liblunar", val, VAL_LEN, NULL), 0);
	H_ASSERT_EQ(lunar_get_into(ca, "claimed/right", out, VAL_LEN), VAL_LEN);
	H_ASSERT(!memcmp(out, val, VAL_LEN));
	memset(out, 0, VAL_LEN);
	H_ASSERT_EQ(lunar_get_into(ca, "claimed/liblunar", out, VAL_LEN), VAL_LEN);
	H_ASSERT(!memcmp(out, val, VAL_LEN));
	lunar_close(ca);
	return wrong;
}

/* The value under key as a reader on B gets it: a code, never other bytes. */
static int64_t read_on_b(const char *key)
{
	struct lunar_client *cb = h_client(sock_b);
	int64_t got;

	memset(out, 0, VAL_LEN);
	got = lunar_get_into(cb, key, out, VAL_LEN);
	lunar_close(cb);
	H_ASSERT_MSG(got < 0 || !memcmp(out, val, VAL_LEN), "%s read other bytes", key);
	return got;
}

static void test_client_crc_keyed_owner_checks_the_claim(void **state)
{
	static char text[1 << 16];
	int64_t wrong;

	(void)state;
	h_fill(val, VAL_LEN, 41);
	wrong = claims();
	H_ASSERT_MSG(wrong < 0, "a put claiming a wrong CRC32C returned %lld", (long long)wrong);
	H_ASSERT_EQ(read_on_b("claimed/wrong"), LUNAR_ERR_OBJECT_NOT_FOUND);
	H_ASSERT_EQ(hg_get(hg_log_http_port(proxy_b->log), "/metrics", text, sizeof(text)), 200);
	H_ASSERT(hg_metric(text, CRC_REJECT) >= 1);
}

static void test_client_crc_keyless_claim_never_gives_wrong_bytes(void **state)
{
	(void)state;
	h_fill(val, VAL_LEN, 43);
	H_ASSERT_EQ(claims(), 0); /* nothing checks it on the way */
	H_ASSERT_EQ(read_on_b("claimed/wrong"), LUNAR_ERR_CHECKSUM_MISMATCH);
	H_ASSERT_EQ(read_on_b("claimed/right"), VAL_LEN);
}

/* p's count of puts whose commit travelled beside their write. */
static int64_t beside_count(const struct h_proc *p)
{
	static char text[1 << 16];

	H_ASSERT_EQ(hg_get(hg_log_http_port(p->log), "/metrics", text, sizeof(text)), 200);
	return hg_metric(text, BESIDE);
}

/* Through the proxy p serving sock, once staged puts go beside (it has a
 * reservation at hand), put a registered value of BIG_LEN as key; how many
 * of p's puts went beside with it (0 or 1). It reads back exact through
 * A and B (checked by its CRC32C on the way out of B). */
static int64_t registered_beside(const struct h_proc *p, const char *sock, const char *key)
{
	struct lunar_client *c = h_client(sock), *ca = h_client(sock_a), *cb = h_client(sock_b);
	uint64_t end = h_now_ms() + H_BOUND_MS(10000);
	uint8_t *big = lunar_alloc(c, BIG_LEN), *got = malloc(BIG_LEN);
	int64_t before;

	H_ASSERT(big && got);
	h_fill(val, VAL_LEN, 47);
	for (int n = 0; beside_count(p) == 0 && h_now_ms() < end; n++) {
		char staged[48];

		snprintf(staged, sizeof(staged), "%s-staged-%d", key, n);
		H_ASSERT_EQ(lunar_put(c, staged, val, VAL_LEN, NULL), 0);
		h_sleep_ms(20);
	}
	before = beside_count(p);
	H_ASSERT_MSG(before > 0, "no staged put went beside within 10 s");
	h_fill(big, BIG_LEN, 53);
	H_ASSERT_EQ(lunar_put(c, key, big, BIG_LEN, NULL), 0);
	before = beside_count(p) - before;
	H_ASSERT_EQ(lunar_get_into(cb, key, got, BIG_LEN), BIG_LEN);
	H_ASSERT(!memcmp(got, big, BIG_LEN));
	memset(got, 0, BIG_LEN);
	H_ASSERT_EQ(lunar_get_into(ca, key, got, BIG_LEN), BIG_LEN);
	H_ASSERT(!memcmp(got, big, BIG_LEN));
	free(got);
	lunar_free(c, big);
	lunar_close(cb);
	lunar_close(ca);
	lunar_close(c);
	return before;
}

/* A's write to B goes in one slice, which would take the CRC32C in the
 * same pass as it sends: A takes it first, and commits beside (it sent
 * values over 64 KiB after their write before). B's write to its own
 * segment takes it in its copy: a pass first would cost more than the
 * round trip it saves, so B commits after. */
static void test_client_crc_registered_value_commits_beside(void **state)
{
	(void)state;
	H_ASSERT_EQ(registered_beside(proxy_a, sock_a, "beside/remote"), 1);
	H_ASSERT_EQ(registered_beside(proxy_b, sock_b, "beside/local"), 0);
}

/* A proxy with a master of its own copies every put into its segment,
 * which takes the CRC32C on the way for nothing: it asks liblunar for none. */
static void test_client_crc_embedded_asks_for_none(void **state)
{
	char sock[PATH_MAX];
	struct lunar_client *cl;
	struct raw c;

	(void)state;
	H_ASSERT(h_embedded_node(sock, &cl, NULL));
	raw_open(&c, sock);
	H_ASSERT_EQ(c.welcome_flags, LC_WELCOME_LANDED);
	raw_close(&c);
	h_embedded_node_stop(&cl);
}

int main(void)
{
	/* Keyed first: the keyless case's h_keyless holds for the rest. */
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_client_crc_keyed_owner_checks_the_claim,
					    keyed_setup, teardown),
	    cmocka_unit_test_setup_teardown(test_client_crc_keyless_claim_never_gives_wrong_bytes,
					    keyless_setup, teardown),
	    cmocka_unit_test_setup_teardown(test_client_crc_registered_value_commits_beside,
					    keyless_setup, teardown),
	    cmocka_unit_test(test_client_crc_embedded_asks_for_none),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
