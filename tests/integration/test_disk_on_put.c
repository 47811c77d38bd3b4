/*
 * test_disk_on_put.c - the SSD tier on a single node (embedded master):
 * --offload on_put gives a committed object a LOCAL_DISK replica next to
 * its MEMORY one, and once DRAM evicts it the object reads from disk; a
 * disk tier smaller than the data (disk full) leaves the proxy serving from
 * DRAM, counts the failures, and never returns half-written bytes. Prints
 * the offload write rate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "disk_util.h"
#include "tests/cmocka_main.h"

static uint8_t *buf;
static char status[1 << 14];

static int setup(void **state)
{
	(void)state;
	buf = malloc(2 * D_MIB);
	return h_init() == 0 && buf ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(buf);
	h_cleanup();
	return 0;
}

static long long disk_figure(int http, const char *name)
{
	H_ASSERT(d_http_get(http, "/disk/status", status, sizeof(status)) > 0);
	return d_json_num(status, name);
}

/* Poll key's replicas until they read want, for up to 15 s. */
static void wait_replicas(int http, const char *key, const char *want)
{
	char types[16] = "";
	uint64_t end = h_now_ms() + 15000;

	while (h_now_ms() < end) {
		d_replicas(http, key, types, sizeof(types));
		if (!strcmp(types, want))
			return;
		h_sleep_ms(50);
	}
	H_ASSERT_MSG(0, "%s has replicas '%s', expected '%s'", key, types, want);
}

static void test_disk_on_put_memory_then_disk(void **state)
{
	const char *sock = h_path("p.sock"), *dir = h_path("disk-p");
	struct h_proc *p =
	    h_start_proxy("onput", sock, H_EMBEDDED, "--segment-size", "48MiB", "--disk-dir", dir,
			  "--disk-capacity", "512MiB", "--offload", "on_put", "--kv-lease-ttl",
			  "200ms", "--ping-interval", "100ms", NULL);
	struct lunar_client *c;
	char key[64];
	uint64_t t0;
	int http;

	(void)state;
	H_ASSERT(p != NULL);
	http = d_proxy_http_port(p);
	c = h_client(sock);
	t0 = h_now_ms();
	for (int i = 0; i < 32; i++) {
		snprintf(key, sizeof(key), "onput/obj-%03d", i);
		H_ASSERT_EQ(d_put(c, key, buf, D_MIB), 0);
	}
	while (disk_figure(http, "offloads") < 32 && h_now_ms() < t0 + 20000)
		h_sleep_ms(5);
	H_ASSERT_EQ(disk_figure(http, "offloads"), 32);
	print_message("offload_objects=32 offload_object_bytes=%u offload_write_gbps=%.3f\n", D_MIB,
		      32.0 * D_MIB / ((double)(h_now_ms() - t0) * 1e6));
	wait_replicas(http, "onput/obj-000", "MD");
	/* DRAM fills up: the object keeps living on its disk copy */
	for (int i = 32; i < 120; i++) {
		snprintf(key, sizeof(key), "onput/obj-%03d", i);
		H_ASSERT_EQ(d_put(c, key, buf, D_MIB), 0);
	}
	wait_replicas(http, "onput/obj-000", "D");
	H_ASSERT_EQ(d_get_exact(c, "onput/obj-000", buf, 2 * D_MIB), D_MIB);
	lunar_close(c);
	h_stop(p);
}

static void test_disk_on_put_disk_full(void **state)
{
	const char *sock = h_path("f.sock"), *dir = h_path("disk-f");
	struct h_proc *p =
	    h_start_proxy("full", sock, H_EMBEDDED, "--segment-size", "16MiB", "--disk-dir", dir,
			  "--disk-capacity", "4MiB", "--offload", "on_evict", "--kv-lease-ttl",
			  "200ms", "--ping-interval", "100ms", NULL);
	struct lunar_client *c;
	int ok = 0, http;
	char key[64];

	(void)state;
	H_ASSERT(p != NULL);
	http = d_proxy_http_port(p);
	c = h_client(sock);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "full/obj-%03d", i);
		H_ASSERT_EQ(d_put(c, key, buf, D_MIB), 0);
	}
	for (int i = 0; i < 40; i++) {
		int64_t n;

		snprintf(key, sizeof(key), "full/obj-%03d", i);
		n = d_get_exact(c, key, buf, 2 * D_MIB);
		H_ASSERT_MSG(n == D_MIB || n == LUNAR_ERR_OBJECT_NOT_FOUND, "%s: %lld (%s)", key,
			     (long long)n, h_code(n));
		ok += n == D_MIB;
	}
	H_ASSERT(disk_figure(http, "write_failures") + disk_figure(http, "full_failures") +
		     disk_figure(http, "evicted_buckets") >
		 0);
	print_message("disk full: %d of 40 readable; %s", ok, strstr(status, "{"));
	H_ASSERT(disk_figure(http, "used") <= 4 * (long long)D_MIB);
	H_ASSERT(h_alive(p));
	H_ASSERT_EQ(d_put(c, "full/after", buf, D_MIB), 0);
	H_ASSERT_EQ(d_get_exact(c, "full/after", buf, 2 * D_MIB), D_MIB);
	lunar_close(c);
	h_stop(p);
}

LUNAR_TEST_MAIN(setup, teardown, test_disk_on_put_memory_then_disk, test_disk_on_put_disk_full)
