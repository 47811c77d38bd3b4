/*
 * test_disk_forget.c - a removed object stays removed on a real cluster: a
 * lunar-master with --offload on_put and one proxy with a disk tier. An
 * object removed once it has its LOCAL_DISK copy is deleted from the SSD
 * tier by the proxy (the master's next Ping says so), so a proxy killed and
 * restarted on the same --disk-dir does not bring it back when it
 * re-registers its records; a key not removed reads byte-exact after it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "disk_util.h"
#include "tests/cmocka_main.h"

#define GONE "forget/gone"
#define KEPT "forget/kept"

static char sock[PATH_MAX], dir[PATH_MAX];
static struct h_proc *proxy;
static struct lunar_client *c;
static uint8_t *buf;
static char status[1 << 14];

static struct h_proc *start_proxy(const char *name)
{
	return d_start_proxy(name, sock, dir, "64MiB");
}

static int setup(void **state)
{
	(void)state;
	if (h_init() != 0 || d_start_master("on_put", "1s") != 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("p.sock"));
	snprintf(dir, sizeof(dir), "%s", h_path("disk-p"));
	proxy = start_proxy("proxy");
	if (!proxy)
		return -1;
	c = h_client_try(sock, H_CLIENT_TIMEOUT_MS, NULL);
	buf = malloc(2 * D_MIB);
	return c && buf ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	lunar_close(c);
	free(buf);
	h_stop(proxy);
	h_cleanup();
	return 0;
}

/* Poll key's replicas at the master until they include a LOCAL_DISK one. */
static void wait_on_disk(const char *key)
{
	char types[16] = "";
	uint64_t end = h_now_ms() + 15000;

	while (h_now_ms() < end) {
		d_replicas(d_master_http, key, types, sizeof(types));
		if (strchr(types, 'D'))
			return;
		h_sleep_ms(50);
	}
	H_ASSERT_MSG(0, "%s has replicas '%s', no LOCAL_DISK one", key, types);
}

/* The proxy's live disk records, polled until want for up to 5 s. */
static long long wait_records(int http, long long want)
{
	uint64_t end = h_now_ms() + 5000;
	long long n = -1;

	while (h_now_ms() < end) {
		H_ASSERT(d_http_get(http, "/disk/status", status, sizeof(status)) > 0);
		n = d_json_num(status, "records");
		if (n == want)
			break;
		h_sleep_ms(50);
	}
	return n;
}

static void test_disk_forget_removed_stays_removed(void **state)
{
	char types[16];
	uint64_t end;
	int64_t n = -1;
	int http;

	(void)state;
	http = d_proxy_http_port(proxy);
	H_ASSERT(http > 0);
	/* Given: two objects, each with its copy in the proxy's SSD tier */
	H_ASSERT_EQ(d_put(c, GONE, buf, D_MIB), 0);
	H_ASSERT_EQ(d_put(c, KEPT, buf, D_MIB), 0);
	wait_on_disk(GONE);
	wait_on_disk(KEPT);
	H_ASSERT_EQ(wait_records(http, 2), 2);
	/* When: one is removed, a few pings pass, and the proxy is killed */
	H_ASSERT_EQ(lunar_remove(c, GONE, 1), 0);
	H_ASSERT_EQ(wait_records(http, 1), 1); /* the Ping's forget deleted its record */
	h_sleep_ms(200);
	lunar_close(c);
	h_kill(proxy);
	proxy = start_proxy("proxy2");
	H_ASSERT(proxy != NULL);
	c = h_client(sock);
	/* Then: after re-registration the kept key reads exact from disk... */
	for (end = h_now_ms() + 15000; h_now_ms() < end; h_sleep_ms(200)) {
		n = d_get_exact(c, KEPT, buf, 2 * D_MIB);
		d_replicas(d_master_http, KEPT, types, sizeof(types));
		if (n == D_MIB && !strcmp(types, "D"))
			break;
	}
	H_ASSERT_MSG(n == D_MIB, "%s after restart: %lld (%s)", KEPT, (long long)n, h_code(n));
	H_ASSERT_EQ(d_get_exact(c, KEPT, buf, 2 * D_MIB), D_MIB);
	/* ...and the removed one did not come back */
	n = lunar_get_into(c, GONE, buf, 2 * D_MIB);
	H_ASSERT_MSG(n == LUNAR_ERR_OBJECT_NOT_FOUND, "%s after restart: %lld (%s)", GONE,
		     (long long)n, h_code(n));
	d_replicas(d_master_http, GONE, types, sizeof(types));
	H_ASSERT_MSG(!types[0], "%s has replicas '%s'", GONE, types);
}

LUNAR_TEST_MAIN(setup, teardown, test_disk_forget_removed_stays_removed)
