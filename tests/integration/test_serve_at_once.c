/*
 * test_serve_at_once.c - a proxy with a large segment serves at once: its
 * segment is made resident beside it, not before it. With a 2 GiB segment
 * (MAP_NORESERVE; skipped when the machine has less than 4 GiB available,
 * since the segment becomes resident meanwhile) a client's first put is
 * stored, and read back, within 1 s of the proxy's start (3 s under a
 * sanitizer, as every bound: H_BOUND_MS), even where the hypervisor backs
 * the segment's memory lazily and residency takes seconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "lunar.h"
#include "tests/cmocka_main.h"

#define FIRST_PUT_MS 1000

/* MemAvailable from /proc/meminfo, in MiB; 0 when unknown. */
static unsigned long long mem_available_mib(void)
{
	unsigned long long kib = 0;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib / 1024;
}

static void test_serve_at_once_first_put(void **state)
{
	char sock[PATH_MAX], val[4096], back[4096];
	struct lunar_client *c;
	uint64_t t0, took;
	int64_t n;

	(void)state;
	if (mem_available_mib() < 4096) {
		print_message("skipped: less than 4 GiB available for a 2 GiB segment\n");
		skip();
	}
	h_named_sock(sock, "big");
	t0 = h_now_ms();
	H_ASSERT(h_start_proxy("big", sock, H_EMBEDDED, "--segment-size", "2GiB", NULL));
	c = h_client(sock);
	memset(val, 0x5c, sizeof(val));
	H_ASSERT_EQ(lunar_put(c, "first", val, sizeof(val), NULL), 0);
	took = h_now_ms() - t0;
	n = lunar_get_into(c, "first", back, sizeof(back));
	H_ASSERT_EQ(n, (int64_t)sizeof(back));
	H_ASSERT(!memcmp(back, val, sizeof(val)));
	print_message("first put stored %llu ms after start\n", (unsigned long long)took);
	/* A bound on a wait: three times longer under a sanitizer (harness.h). */
	H_ASSERT_MSG(took < (uint64_t)H_BOUND_MS(FIRST_PUT_MS),
		     "first put after %llu ms (bound %d)", (unsigned long long)took,
		     H_BOUND_MS(FIRST_PUT_MS));
	lunar_close(c);
	h_stop_all();
}

LUNAR_TEST_MAIN(h_setup, h_teardown, test_serve_at_once_first_put)
