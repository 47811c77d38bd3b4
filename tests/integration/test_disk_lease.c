/*
 * test_disk_lease.c - a read of an SSD replica is not failed by the lease
 * for being slow: with a 100 ms lease and every disk read held 300 ms
 * (--debug-disk-read-delay), gets of objects living only on disk return
 * their bytes (checked), one by one and as a batch; a disk record is never
 * rewritten in place and is checked against the value's CRC32C, so the
 * lease has nothing to guard there.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "disk_util.h"

#define OBJS 24

static uint8_t *buf;

static int setup(void **state)
{
	(void)state;
	buf = malloc(OBJS * D_MIB);
	return h_init() == 0 && buf ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(buf);
	h_cleanup();
	return 0;
}

static void test_disk_lease_slow_read_succeeds(void **state)
{
	const char *sock = h_path("p.sock");
	struct h_proc *p = h_start_proxy(
	    "slow", sock, H_EMBEDDED, "--segment-size", "16MiB", "--disk-dir", h_path("disk"),
	    "--disk-capacity", "256MiB", "--offload", "on_put", "--kv-lease-ttl", "100ms",
	    "--ping-interval", "100ms", "--debug-disk-read-delay", "300ms", NULL);
	char keys[4][32], types[16] = "";
	const char *kp[4];
	struct iovec iov[4];
	const struct iovec *iovp[4];
	int iovcnt[4];
	struct lunar_client *c;
	uint64_t t0, end;
	int64_t res[4];
	int http;

	(void)state;
	H_ASSERT(p != NULL);
	http = d_proxy_http_port(p);
	c = h_client(sock);
	for (int i = 0; i < OBJS; i++) {
		char key[32];

		snprintf(key, sizeof(key), "slow/obj-%02d", i);
		H_ASSERT_EQ(d_put(c, key, buf, D_MIB), 0);
	}
	/* the first ones now live on disk only */
	for (end = h_now_ms() + 15000; h_now_ms() < end; h_sleep_ms(50)) {
		d_replicas(http, "slow/obj-00", types, sizeof(types));
		if (!strcmp(types, "D"))
			break;
	}
	H_ASSERT_MSG(!strcmp(types, "D"), "slow/obj-00 has replicas '%s'", types);
	t0 = h_now_ms();
	H_ASSERT_EQ(d_get_exact(c, "slow/obj-00", buf, 2 * D_MIB), D_MIB);
	H_ASSERT(h_now_ms() - t0 >= 300);
	for (int i = 0; i < 4; i++) {
		snprintf(keys[i], sizeof(keys[i]), "slow/obj-%02d", i);
		kp[i] = keys[i];
		iov[i] = (struct iovec){buf + (size_t)i * D_MIB, D_MIB};
		iovp[i] = &iov[i];
		iovcnt[i] = 1;
	}
	H_ASSERT_EQ(lunar_batch_get_into(c, 4, kp, iovp, iovcnt, res), 0);
	for (int i = 0; i < 4; i++) {
		H_ASSERT_MSG(res[i] == D_MIB || res[i] == LUNAR_ERR_OBJECT_NOT_FOUND,
			     "%s: %lld (%s)", keys[i], (long long)res[i], h_code(res[i]));
		if (res[i] == D_MIB)
			H_ASSERT(h_verify(buf + (size_t)i * D_MIB, D_MIB, h_seed(keys[i])) < 0);
	}
	lunar_close(c);
	h_stop(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_disk_lease_slow_read_succeeds),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
