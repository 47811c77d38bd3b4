/*
 * test_step2_lease_expired.c - a read whose transfer ends after its lease
 * deadline fails with LEASE_EXPIRED and its bytes are not reported as good
 * (SPEC §3). With 1 ms leases, copying 64 MiB takes longer than the lease;
 * with the default 10 s lease the same read succeeds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "harness.h"

#define BIG (64u << 20)

static void read_big(const char *ttl, int64_t want)
{
	char sock[PATH_MAX];
	struct lunar_client *c;
	unsigned char *src, *dst;

	snprintf(sock, sizeof(sock), "%s", h_path(ttl));
	H_ASSERT(h_start_proxy(ttl, sock, H_EMBEDDED, "--segment-size", "256MiB", "--kv-lease-ttl",
			       ttl, NULL) != NULL);
	c = h_client(sock);
	H_ASSERT(c != NULL);
	/* Registered memory: no staging, the proxy copies straight in and out. */
	src = lunar_alloc(c, BIG);
	dst = lunar_alloc(c, BIG);
	H_ASSERT(src && dst);
	h_fill(src, BIG, h_seed("big"));
	memset(dst, 0, BIG);
	H_ASSERT_EQ(lunar_put(c, "big", src, BIG, NULL), 0);
	H_ASSERT_EQ(lunar_get_into(c, "big", dst, BIG), want);
	if (want == BIG)
		H_ASSERT_EQ(h_verify(dst, BIG, h_seed("big")), -1);
	lunar_free(c, src);
	lunar_free(c, dst);
	lunar_close(c);
}

static void test_step2_lease_expired_read_is_not_good(void **state)
{
	(void)state;
	H_ASSERT_EQ(h_init(), 0);
	/* Given 1 ms leases, When a 64 MiB read takes longer, Then LEASE_EXPIRED */
	read_big("1ms", LUNAR_ERR_LEASE_EXPIRED);
	/* Given the default lease, Then the same read returns every byte */
	read_big("10s", BIG);
	h_cleanup();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_step2_lease_expired_read_is_not_good),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
