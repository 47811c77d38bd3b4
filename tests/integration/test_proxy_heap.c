/*
 * test_proxy_heap.c - the proxy keeps the heap its metadata freed: 20000
 * small objects are put, read and removed, then again; the second round
 * takes almost no page faults in the proxy (glibc's default hands the freed
 * top of the heap back to the kernel and faults it in again: ~1200).
 * Skipped under a sanitizer, whose allocator ignores mallopt.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define OBJECTS	   20000
#define MAX_FAULTS 400 /* the threads' stacks, the HTTP port, the clock... */

/* Put OBJECTS 64-byte values, read each (a lease cached), then remove
 * them one by one. */
static void fill_and_drain(struct lunar_client *c)
{
	char key[32], v[64] = "heap";

	for (int i = 0; i < OBJECTS; i++) {
		snprintf(key, sizeof(key), "heap-%d", i);
		H_ASSERT_EQ(lunar_put(c, key, v, sizeof(v), NULL), 0);
	}
	for (int i = 0; i < OBJECTS; i++) {
		snprintf(key, sizeof(key), "heap-%d", i);
		H_ASSERT_EQ(lunar_get_into(c, key, v, sizeof(v)), (int64_t)sizeof(v));
	}
	for (int i = 0; i < OBJECTS; i++) {
		snprintf(key, sizeof(key), "heap-%d", i);
		H_ASSERT_EQ(lunar_remove(c, key, 1), 0);
	}
}

static void test_proxy_heap_refill_takes_no_faults(void **state)
{
	struct lunar_client *c = NULL;
	char sock[PATH_MAX];
	struct h_proc *px;
	int64_t before, faults;

	(void)state;
	if (getenv("LUNAR_TEST_SANITIZER")) {
		printf("skipped: built with a sanitizer (%s), whose allocator keeps its own "
		       "heap\n",
		       getenv("LUNAR_TEST_SANITIZER"));
		skip();
	}
	px = h_embedded_node(sock, &c, NULL);
	H_ASSERT(px != NULL);
	fill_and_drain(c);
	before = h_pid_minor_faults(px->pid);
	H_ASSERT(before >= 0);
	fill_and_drain(c);
	faults = h_pid_minor_faults(px->pid) - before;
	printf("proxy page faults during the refill: %lld\n", (long long)faults);
	H_ASSERT_MSG(faults < MAX_FAULTS, "the refill took %lld page faults", (long long)faults);
	h_embedded_node_stop(&c);
}

LUNAR_TEST_MAIN(NULL, NULL, test_proxy_heap_refill_takes_no_faults)
