/*
 * test_zero_copy.c - zero-copy memory on an embedded-master proxy
 * (SPEC §4, §5.8): lunar_alloc blocks and the app's own sealed memfd given to
 * lunar_register round-trip byte-exact, at offsets inside the region and in
 * scatter lists that mix registered and malloc memory. The client's arena is
 * 1 MiB, so values of several MiB cannot be staged: from other memory they
 * bounce through a lunar_alloc chunk, which registered memory must never
 * need. The proxy's /proc/<pid>/maps shows the app's memfd mapped while it
 * is registered, and gone after unregister.
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
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define KIB	   1024u
#define MIB	   (1024u * 1024u)
#define ARENA	   MIB		    /* the proxy's minimum; values below are larger */
#define BIG	   (3u * MIB + 777) /* does not fit the arena: must go in place */
#define REGION_LEN (16u * MIB)

static char sock[PATH_MAX];
static struct h_proc *proxy;
static struct lunar_client *cl;

static int setup(void **state)
{
	(void)state;
	if (h_init() != 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	proxy = h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "128MiB", NULL);
	return proxy ? 0 : -1;
}

static int case_setup(void **state)
{
	(void)state;
	cl = h_client_arena(sock, H_CLIENT_TIMEOUT_MS, ARENA);
	return cl ? 0 : -1;
}

static int case_teardown(void **state)
{
	(void)state;
	lunar_close(cl);
	cl = NULL;
	return 0;
}

/* Lines of the proxy's maps naming the memfd, after waiting up to ms for
 * the count to become want (the proxy unmaps when the last user leaves). */
static int proxy_maps_settle(const char *needle, int want, unsigned ms)
{
	uint64_t end = h_now_ms() + ms;
	int n;

	while ((n = h_pid_maps_count(proxy->pid, needle)) != want && h_now_ms() < end)
		h_sleep_ms(20);
	return n;
}

/* The object's bytes gathered from a scatter list, checked against key. */
static void expect_iov(const char *key, const struct iovec *iov, int n, size_t total)
{
	uint8_t *all = malloc(total), *at = all;
	int64_t bad;

	H_ASSERT(all != NULL);
	for (int i = 0; i < n; i++) {
		memcpy(at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	H_ASSERT_EQ(at - all, total);
	bad = h_verify(all, total, h_seed(key));
	H_ASSERT_MSG(bad < 0, "%s: wrong byte at %lld of %zu", key, (long long)bad, total);
	free(all);
}

/* Scatter key's pattern over iov (the value the pieces form). */
static void fill_iov(const char *key, const struct iovec *iov, int n, size_t total)
{
	uint8_t *all = malloc(total), *at = all;

	H_ASSERT(all != NULL);
	h_fill(all, total, h_seed(key));
	for (int i = 0; i < n; i++) {
		memcpy(iov[i].iov_base, at, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	free(all);
}

static void test_zero_copy_alloc_round_trip(void **state)
{
	const char *key = "zc/alloc";
	uint8_t *src, *dst;
	int before;

	(void)state;
	before = h_pid_maps_count(proxy->pid, "memfd:lunar-alloc");
	src = lunar_alloc(cl, BIG);
	dst = lunar_alloc(cl, BIG);
	H_ASSERT(src != NULL && dst != NULL);
	H_ASSERT_MSG(h_pid_maps_count(proxy->pid, "memfd:lunar-alloc") > before,
		     "lunar_alloc: the proxy has not mapped the chunk (%d lunar-alloc maps)",
		     h_pid_maps_count(proxy->pid, "memfd:lunar-alloc"));
	h_fill(src, BIG, h_seed(key));
	H_ASSERT_EQ(lunar_put(cl, key, src, BIG, NULL), 0);
	memset(dst, 0, BIG);
	H_ASSERT_EQ(lunar_get_into(cl, key, dst, BIG), BIG);
	H_ASSERT_MSG(h_verify(dst, BIG, h_seed(key)) < 0, "alloc'd get: wrong bytes at %lld",
		     (long long)h_verify(dst, BIG, h_seed(key)));
	/* And a small value at an odd place inside a block. */
	h_fill(src + 13, 5000, h_seed("zc/alloc-small"));
	H_ASSERT_EQ(lunar_put(cl, "zc/alloc-small", src + 13, 5000, NULL), 0);
	memset(dst, 0, 8192);
	H_ASSERT_EQ(lunar_get_into(cl, "zc/alloc-small", dst + 1001, 5000), 5000);
	H_ASSERT(h_verify(dst + 1001, 5000, h_seed("zc/alloc-small")) < 0);
	lunar_free(cl, src);
	lunar_free(cl, dst);
}

/* Whether this process maps a lunar_alloc chunk: the tests below use
 * none, so one there means a value bounced instead of going in place. */
static int bounced(void)
{
	return h_pid_maps_count(getpid(), "memfd:lunar-alloc") > 0;
}

/* What a malloc'd value of the same size does with this arena: it bounces
 * through a lunar_alloc chunk, which shows the check the in-place tests
 * below make proves something. */
static void test_zero_copy_staged_control(void **state)
{
	uint8_t *buf = malloc(BIG);

	(void)state;
	H_ASSERT(buf != NULL);
	H_ASSERT(!bounced());
	h_fill(buf, BIG, h_seed("zc/control"));
	H_ASSERT_EQ(lunar_put(cl, "zc/control", buf, BIG, NULL), 0);
	H_ASSERT_MSG(bounced(), "a %u-byte value on a %u-byte arena did not bounce", BIG, ARENA);
	free(buf);
}

static void test_zero_copy_register_memfd_offsets(void **state)
{
	const char *k1 = "zc/reg-1", *k2 = "zc/reg-2";
	uint8_t *mem;
	int fd;

	(void)state;
	mem = h_app_memfd("t3-app-mem", REGION_LEN, &fd);
	H_ASSERT_EQ(lunar_register(cl, mem, REGION_LEN), 0);
	H_ASSERT_MSG(proxy_maps_settle("memfd:t3-app-mem", 1, 1000) >= 1,
		     "the proxy has not mapped the registered memfd");
	/* Source and destination at odd offsets, well inside the region. */
	h_fill(mem + 3 * 4096 + 123, BIG, h_seed(k1));
	H_ASSERT_EQ(lunar_put(cl, k1, mem + 3 * 4096 + 123, BIG, NULL), 0);
	memset(mem + 8 * MIB + 77, 0, BIG);
	H_ASSERT_EQ(lunar_get_into(cl, k1, mem + 8 * MIB + 77, BIG), BIG);
	H_ASSERT(h_verify(mem + 8 * MIB + 77, BIG, h_seed(k1)) < 0);
	/* The last bytes of the region, up to its very end. */
	h_fill(mem + REGION_LEN - 2 * MIB, 2 * MIB, h_seed(k2));
	H_ASSERT_EQ(lunar_put(cl, k2, mem + REGION_LEN - 2 * MIB, 2 * MIB, NULL), 0);
	memset(mem, 0, 2 * MIB);
	H_ASSERT_EQ(lunar_get_into(cl, k2, mem + 1, 2 * MIB), 2 * MIB);
	H_ASSERT(h_verify(mem + 1, 2 * MIB, h_seed(k2)) < 0);
	H_ASSERT_MSG(!bounced(), "registered memory went through a lunar_alloc chunk");
	/* Registering the same range again is a no-op success. */
	H_ASSERT_EQ(lunar_register(cl, mem, REGION_LEN), 0);
	H_ASSERT_EQ(lunar_unregister(cl, mem), 0);
	munmap(mem, REGION_LEN);
	close(fd);
}

/* A mapping that starts 2 MiB into the memfd, registered from an odd
 * address inside it: the proxy must map the right part of the file. */
static void test_zero_copy_register_file_offset(void **state)
{
	const char *key = "zc/file-off";
	size_t maplen = 6 * MIB;
	uint8_t *whole, *part;
	int fd;

	(void)state;
	whole = h_app_memfd("t3-app-off", 8 * MIB, &fd);
	memset(whole, 0xee, 8 * MIB);
	part = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 2 * MIB);
	H_ASSERT(part != MAP_FAILED);
	H_ASSERT_EQ(lunar_register(cl, part + 100, maplen - 200), 0);
	h_fill(part + 100, BIG, h_seed(key));
	H_ASSERT_EQ(lunar_put(cl, key, part + 100, BIG, NULL), 0);
	memset(whole, 0, 8 * MIB);
	H_ASSERT_EQ(lunar_get_into(cl, key, part + 100, BIG), BIG);
	H_ASSERT(h_verify(part + 100, BIG, h_seed(key)) < 0);
	/* The same bytes seen through the other mapping: really the file. */
	H_ASSERT(h_verify(whole + 2 * MIB + 100, BIG, h_seed(key)) < 0);
	H_ASSERT_MSG(!bounced(), "registered memory went through a lunar_alloc chunk");
	H_ASSERT_EQ(lunar_unregister(cl, part + 100), 0);
	munmap(part, maplen);
	munmap(whole, 8 * MIB);
	close(fd);
}

/* putv/getv with pieces in registered memory, alloc'd memory and malloc
 * memory, split at different places going in and coming out. */
static void test_zero_copy_mixed_iovecs(void **state)
{
	const char *key = "zc/mixed";
	uint8_t *mem, *blk, *m1 = malloc(100 * KIB), *m2 = malloc(3), *m3 = malloc(50 * KIB),
			    *m4 = malloc(53 * KIB);
	size_t total = 1536 * KIB + 100 * KIB + 700 * KIB + 3;
	struct iovec in[4], out[4];
	int fd;

	(void)state;
	H_ASSERT(m1 && m2 && m3 && m4);
	mem = h_app_memfd("t3-app-mix", REGION_LEN, &fd);
	H_ASSERT_EQ(lunar_register(cl, mem, REGION_LEN), 0);
	blk = lunar_alloc(cl, 3 * MIB);
	H_ASSERT(blk != NULL);
	in[0] = (struct iovec){mem + 4096 + 9, 1536 * KIB};
	in[1] = (struct iovec){m1, 100 * KIB};
	in[2] = (struct iovec){mem + 5 * MIB + 3, 700 * KIB};
	in[3] = (struct iovec){m2, 3};
	fill_iov(key, in, 4, total);
	H_ASSERT_EQ(lunar_putv(cl, key, in, 4, NULL), 0);
	H_ASSERT_EQ(lunar_get_size(cl, key), total);
	out[0] = (struct iovec){m3, 50 * KIB};
	out[1] = (struct iovec){mem + 9 * MIB + 1, MIB};
	out[2] = (struct iovec){m4, 53 * KIB};
	out[3] = (struct iovec){blk + 64, total - 50 * KIB - MIB - 53 * KIB};
	for (int i = 0; i < 4; i++)
		memset(out[i].iov_base, 0, out[i].iov_len);
	H_ASSERT_EQ(lunar_getv(cl, key, out, 4), total);
	expect_iov(key, out, 4, total);
	/* The same value into one alloc'd block, through lunar_get_into. */
	memset(blk, 0, 3 * MIB);
	H_ASSERT_EQ(lunar_get_into(cl, key, blk, 3 * MIB), total);
	H_ASSERT(h_verify(blk, total, h_seed(key)) < 0);
	lunar_free(cl, blk);
	H_ASSERT_EQ(lunar_unregister(cl, mem), 0);
	munmap(mem, REGION_LEN);
	close(fd);
	free(m1);
	free(m2);
	free(m3);
	free(m4);
}

/* Memory that is not a shared, shrink-sealed memfd mapping is refused. */
static void test_zero_copy_register_refuses_other_memory(void **state)
{
	size_t len = 4 * MIB;
	uint8_t *heap = malloc(len), *anon, *priv, *unsealed;
	int fd, ufd;

	(void)state;
	H_ASSERT(heap != NULL);
	H_ASSERT_EQ(lunar_register(cl, heap, len), LUNAR_ERR_INVALID_PARAMS);
	anon = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	H_ASSERT(anon != MAP_FAILED);
	H_ASSERT_EQ(lunar_register(cl, anon, len), LUNAR_ERR_INVALID_PARAMS);
	/* A sealed memfd, but mapped private: the proxy would not see writes. */
	munmap(h_app_memfd("t3-app-priv", len, &fd), len);
	priv = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	H_ASSERT(priv != MAP_FAILED);
	H_ASSERT_EQ(lunar_register(cl, priv, len), LUNAR_ERR_INVALID_PARAMS);
	/* A shared memfd mapping without F_SEAL_SHRINK could SIGBUS the proxy. */
	ufd = memfd_create("t3-app-unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	H_ASSERT(ufd >= 0 && ftruncate(ufd, (off_t)len) == 0);
	unsealed = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ufd, 0);
	H_ASSERT(unsealed != MAP_FAILED);
	H_ASSERT_EQ(lunar_register(cl, unsealed, len), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(h_pid_maps_count(proxy->pid, "memfd:t3-app-unsealed"), 0);
	/* Refused memory still works, staged through the arena. */
	h_fill(heap, 200 * KIB, h_seed("zc/heap"));
	H_ASSERT_EQ(lunar_put(cl, "zc/heap", heap, 200 * KIB, NULL), 0);
	H_ASSERT_EQ(lunar_get_into(cl, "zc/heap", unsealed + 5, 200 * KIB), 200 * KIB);
	H_ASSERT(h_verify(unsealed + 5, 200 * KIB, h_seed("zc/heap")) < 0);
	munmap(unsealed, len);
	munmap(priv, len);
	munmap(anon, len);
	close(ufd);
	close(fd);
	free(heap);
}

/* After lunar_unregister the proxy lets go of the memory, and the same
 * buffers keep working, staged. */
static void test_zero_copy_unregister_then_staged(void **state)
{
	const char *k1 = "zc/unreg-before", *k2 = "zc/unreg-after";
	size_t len = 300 * KIB + 5; /* fits the arena when staged */
	uint8_t *mem;
	int fd, n;

	(void)state;
	mem = h_app_memfd("t3-app-unreg", REGION_LEN, &fd);
	H_ASSERT_EQ(lunar_register(cl, mem, REGION_LEN), 0);
	H_ASSERT(proxy_maps_settle("memfd:t3-app-unreg", 1, 1000) >= 1);
	h_fill(mem + 4096, len, h_seed(k1));
	H_ASSERT_EQ(lunar_put(cl, k1, mem + 4096, len, NULL), 0);
	H_ASSERT_EQ(lunar_unregister(cl, mem), 0);
	n = proxy_maps_settle("memfd:t3-app-unreg", 0, 2000);
	H_ASSERT_MSG(n == 0, "2 s after lunar_unregister the proxy still maps the memfd (%d maps)",
		     n);
	/* Unregistering twice: nothing is registered there any more. */
	H_ASSERT_EQ(lunar_unregister(cl, mem), LUNAR_ERR_INVALID_PARAMS);
	memset(mem + MIB, 0, len);
	H_ASSERT_EQ(lunar_get_into(cl, k1, mem + MIB, len), len);
	H_ASSERT(h_verify(mem + MIB, len, h_seed(k1)) < 0);
	h_fill(mem + 2 * MIB + 1, len, h_seed(k2));
	H_ASSERT_EQ(lunar_put(cl, k2, mem + 2 * MIB + 1, len, NULL), 0);
	memset(mem + 3 * MIB, 0, len);
	H_ASSERT_EQ(lunar_get_into(cl, k2, mem + 3 * MIB, len), len);
	H_ASSERT(h_verify(mem + 3 * MIB, len, h_seed(k2)) < 0);
	munmap(mem, REGION_LEN);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_zero_copy_alloc_round_trip, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_zero_copy_staged_control, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_zero_copy_register_memfd_offsets, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_zero_copy_register_file_offset, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_zero_copy_mixed_iovecs, case_setup, case_teardown),
	    cmocka_unit_test_setup_teardown(test_zero_copy_register_refuses_other_memory,
					    case_setup, case_teardown),
	    cmocka_unit_test_setup_teardown(test_zero_copy_unregister_then_staged, case_setup,
					    case_teardown),
	};

	return cmocka_run_group_tests(tests, setup, h_teardown);
}
