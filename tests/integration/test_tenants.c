/*
 * test_tenants.c - tenants end to end, on real processes: tenants are
 * separate key spaces with their own quotas.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "case_util.h"
#include "tests/cmocka_main.h"

#define KIB 1024u
#define MIB (1024u * 1024u)
static void test_tenants_are_separate_with_quotas(void **state)
{
	const char *sock = h_path("p.sock");
	struct lunar_client *t1, *t2;
	uint8_t *buf = malloc(MIB);
	int rc;

	(void)state;
	H_ASSERT(buf != NULL);
	/* Given an embedded node where tenant t1 may store 1 MiB */
	H_ASSERT(h_start_proxy("proxy", sock, H_EMBEDDED, "--tenant-quota", "t1=1MiB", NULL) !=
		 NULL);
	t1 = tenant_client(sock, "t1");
	t2 = tenant_client(sock, "t2");

	/* When both tenants put the same key with different values, Then they
	 * are two objects */
	put_seeded(t1, "same", buf, 4 * KIB, 1, NULL);
	put_seeded(t2, "same", buf, 8 * KIB, 2, NULL);
	check_seeded(t1, "same", buf, 4 * KIB, 1);
	check_seeded(t2, "same", buf, 8 * KIB, 2);
	H_ASSERT_EQ(lunar_get_size(t1, "same"), 4 * KIB);
	H_ASSERT_EQ(lunar_get_size(t2, "same"), 8 * KIB);
	/* When t1 removes all, Then t2's object stays */
	H_ASSERT_EQ(lunar_remove_all(t1, 1), 1);
	H_ASSERT_EQ(lunar_exists(t1, "same"), 0);
	H_ASSERT_EQ(lunar_exists(t2, "same"), 1);
	check_seeded(t2, "same", buf, 8 * KIB, 2);

	/* When t1 puts past its 1 MiB quota, Then TENANT_QUOTA_EXCEEDED, and
	 * nothing of the refused put is left */
	put_seeded(t1, "q/1", buf, 600 * KIB, 11, NULL);
	h_fill(buf, 600 * KIB, 12);
	rc = lunar_put(t1, "q/2", buf, 600 * KIB, NULL);
	H_ASSERT_EQ(rc, LUNAR_ERR_TENANT_QUOTA_EXCEEDED);
	H_ASSERT_EQ(lunar_exists(t1, "q/2"), 0);
	/* and t2, without a quota, stores the same amount and more */
	put_seeded(t2, "q/1", buf, 600 * KIB, 21, NULL);
	put_seeded(t2, "q/2", buf, 600 * KIB, 22, NULL);
	put_seeded(t2, "q/3", buf, 600 * KIB, 23, NULL);
	/* and once t1 frees room, its put fits again */
	H_ASSERT_EQ(lunar_remove(t1, "q/1", 1), 0);
	put_seeded(t1, "q/2", buf, 600 * KIB, 12, NULL);
	check_seeded(t1, "q/2", buf, 600 * KIB, 12);
	check_seeded(t2, "q/1", buf, 600 * KIB, 21);
	lunar_close(t1);
	lunar_close(t2);
	free(buf);
}

LUNAR_TEST_MAIN_EACH(case_setup, case_teardown, test_tenants_are_separate_with_quotas)
