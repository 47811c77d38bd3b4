/*
 * test_zero_copy_cluster.c - zero-copy across proxies (SPEC §5.8, §7).
 * One lunar-master; proxy A contributes no DRAM (--segment-size 0), so every
 * replica of a put through A lands on proxy B's segment and travels over the
 * data port. An app on A puts from its registered memfd; an app on B reads
 * into its registered memfd, and the app on A reads back into lunar_alloc
 * memory (a remote read straight into app memory). Both clients have a 1 MiB
 * arena and the values are larger, so nothing can be staged. Last, a third
 * proxy C with its own segment: puts from A naming B or C as the preferred
 * segment land there - once C is killed, exactly the keys that named C are
 * gone, while those that named B read byte-exact through B. Beside an
 * RDMA device (tests/vm/), A's put and read back go by RDMA.
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
#include "tests/cmocka_main.h"

#define KIB	   1024u
#define MIB	   (1024u * 1024u)
#define ARENA	   MIB
#define BIG	   (3u * MIB + 4321)
#define REGION_LEN (16u * MIB)

static char sock_a[PATH_MAX], sock_b[PATH_MAX];
static char seg_b[H_SEG_NAME];
static int master_port;
static struct h_proc *proxy_a, *proxy_b;
static struct lunar_client *ca, *cb;
static uint8_t *mem_a, *mem_b;
static int fd_a = -1, fd_b = -1;

static struct lunar_client *connect_small_arena(const char *path)
{
	struct lunar_opts o = {
	    .socket_path = path, .timeout_ms = H_CLIENT_TIMEOUT_MS, .arena_bytes = ARENA};
	struct lunar_client *c = NULL;

	return lunar_connect(&o, &c) == 0 ? c : NULL;
}

static uint8_t *app_memfd(const char *name, size_t len, int *fd)
{
	uint8_t *p;

	*fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*fd < 0 || ftruncate(*fd, (off_t)len) || fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK))
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

static int setup(void **state)
{
	(void)state;
	if (!h_cluster_master(&master_port, NULL))
		return -1;
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	proxy_a = h_start_proxy("proxyA", sock_a, master_port, "--segment-size", "0", NULL);
	proxy_b =
	    h_start_peer("proxyB", sock_b, master_port, seg_b, "--segment-size", "64MiB", NULL);
	if (!proxy_a || !proxy_b)
		return -1;
	ca = connect_small_arena(sock_a);
	cb = connect_small_arena(sock_b);
	mem_a = app_memfd("t3-app-a", REGION_LEN, &fd_a);
	mem_b = app_memfd("t3-app-b", REGION_LEN, &fd_b);
	if (!ca || !cb || !mem_a || !mem_b) {
		fprintf(stderr, "setup: clients or memfds failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	lunar_close(ca);
	lunar_close(cb);
	ca = cb = NULL;
	if (mem_a)
		munmap(mem_a, REGION_LEN);
	if (mem_b)
		munmap(mem_b, REGION_LEN);
	close(fd_a);
	close(fd_b);
	/* Proxies first: a proxy stopping after the master waits out its
	 * unmount call to a master that is gone. */
	h_stop(proxy_a);
	h_stop(proxy_b);
	h_cleanup();
	return 0;
}

static void test_zero_copy_cluster_register_both_sides(void **state)
{
	(void)state;
	H_ASSERT_EQ(lunar_register(ca, mem_a, REGION_LEN), 0);
	H_ASSERT_EQ(lunar_register(cb, mem_b, REGION_LEN), 0);
	H_ASSERT_MSG(h_pid_maps_count(proxy_a->pid, "memfd:t3-app-a") >= 1,
		     "proxy A has not mapped the app's memfd");
	H_ASSERT_MSG(h_pid_maps_count(proxy_b->pid, "memfd:t3-app-b") >= 1,
		     "proxy B has not mapped the app's memfd");
	/* Each proxy maps only its own client's memory. */
	H_ASSERT_EQ(h_pid_maps_count(proxy_a->pid, "memfd:t3-app-b"), 0);
	H_ASSERT_EQ(h_pid_maps_count(proxy_b->pid, "memfd:t3-app-a"), 0);
}

static void test_zero_copy_cluster_put_on_a_get_on_b(void **state)
{
	const struct lunar_put_cfg one = {.replica_num = 1};
	const char *key = "zcc/a-to-b";
	int64_t mark = h_rdma_mark(proxy_a);
	uint8_t *blk;

	(void)state;
	h_fill(mem_a + 12345, BIG, h_seed(key));
	H_ASSERT_EQ(lunar_put(ca, key, mem_a + 12345, BIG, &one), 0);
	H_ASSERT_EQ(lunar_exists(cb, key), 1);
	H_ASSERT_EQ(lunar_get_size(cb, key), BIG);
	/* B reads it from its own segment into the app's memfd. */
	memset(mem_b + 5 * MIB + 3, 0, BIG);
	H_ASSERT_EQ(lunar_get_into(cb, key, mem_b + 5 * MIB + 3, BIG), BIG);
	H_ASSERT_MSG(h_verify(mem_b + 5 * MIB + 3, BIG, h_seed(key)) < 0, "B: wrong byte at %lld",
		     (long long)h_verify(mem_b + 5 * MIB + 3, BIG, h_seed(key)));
	/* A reads it back from B's segment straight into lunar_alloc memory. */
	blk = lunar_alloc(ca, BIG);
	H_ASSERT(blk != NULL);
	memset(blk, 0, BIG);
	H_ASSERT_EQ(lunar_get_into(ca, key, blk, BIG), BIG);
	H_ASSERT_MSG(h_verify(blk, BIG, h_seed(key)) < 0, "A: wrong byte at %lld",
		     (long long)h_verify(blk, BIG, h_seed(key)));
	h_rdma_check(proxy_a, mark, 2); /* the put and the read back */
	lunar_free(ca, blk);
}

/* Scatter lists on both ends mixing registered, alloc'd and malloc pieces. */
static void test_zero_copy_cluster_mixed_iovecs(void **state)
{
	const char *key = "zcc/mixed";
	size_t total = 2 * MIB + 64 * KIB + MIB + 17;
	uint8_t *all = malloc(total), *heap_in = malloc(64 * KIB), *heap_out = malloc(100 * KIB);
	uint8_t *blk_a = lunar_alloc(ca, MIB + 17), *got = malloc(total), *at;
	struct iovec in[3], out[3];
	int64_t bad;

	(void)state;
	H_ASSERT(all && heap_in && heap_out && blk_a && got);
	h_fill(all, total, h_seed(key));
	in[0] = (struct iovec){mem_a + 9 * MIB + 1, 2 * MIB};
	in[1] = (struct iovec){heap_in, 64 * KIB};
	in[2] = (struct iovec){blk_a, MIB + 17};
	at = all;
	for (int i = 0; i < 3; i++) {
		memcpy(in[i].iov_base, at, in[i].iov_len);
		at += in[i].iov_len;
	}
	H_ASSERT_EQ(lunar_putv(ca, key, in, 3, NULL), 0);
	out[0] = (struct iovec){heap_out, 100 * KIB};
	out[1] = (struct iovec){mem_b + 12 * MIB + 8, 1500 * KIB};
	out[2] = (struct iovec){mem_b + 64, total - 100 * KIB - 1500 * KIB};
	for (int i = 0; i < 3; i++)
		memset(out[i].iov_base, 0, out[i].iov_len);
	H_ASSERT_EQ(lunar_getv(cb, key, out, 3), total);
	at = got;
	for (int i = 0; i < 3; i++) {
		memcpy(at, out[i].iov_base, out[i].iov_len);
		at += out[i].iov_len;
	}
	bad = h_verify(got, total, h_seed(key));
	H_ASSERT_MSG(bad < 0, "%s: wrong byte at %lld of %zu", key, (long long)bad, total);
	lunar_free(ca, blk_a);
	free(all);
	free(heap_in);
	free(heap_out);
	free(got);
}

#define NPREF	 6
#define PREF_LEN (MIB + MIB / 2 + 11)

/* Puts from A's registered memory naming B's or C's segment; then C dies. */
static void test_zero_copy_cluster_preferred_segment_placement(void **state)
{
	char sock_c[PATH_MAX], seg_c[H_SEG_NAME], key[64];
	const char *pref_b[1] = {seg_b}, *pref_c[1] = {seg_c};
	struct lunar_put_cfg on_b = {
	    .replica_num = 1, .preferred_segments = pref_b, .preferred_count = 1};
	struct lunar_put_cfg on_c = {
	    .replica_num = 1, .preferred_segments = pref_c, .preferred_count = 1};
	struct h_proc *proxy_c;
	int64_t lost_rc = 0;
	int lost = 0;

	(void)state;
	snprintf(sock_c, sizeof(sock_c), "%s", h_path("c.sock"));
	proxy_c =
	    h_start_peer("proxyC", sock_c, master_port, seg_c, "--segment-size", "64MiB", NULL);
	H_ASSERT(proxy_c != NULL);
	for (int i = 0; i < 2 * NPREF; i++) {
		uint8_t *src = mem_a + (size_t)(i % 4) * 2 * MIB + 4096 + (size_t)i;

		snprintf(key, sizeof(key), "zcc/pref-%c/%d", i % 2 ? 'c' : 'b', i);
		h_fill(src, PREF_LEN, h_seed(key));
		H_ASSERT_EQ(lunar_put(ca, key, src, PREF_LEN, i % 2 ? &on_c : &on_b), 0);
	}
	h_kill(proxy_c);
	for (int i = 0; i < 2 * NPREF; i++) {
		uint8_t *dst = mem_b + 8 * MIB + (size_t)i;
		uint64_t t0 = h_now_ms();
		int64_t got;

		snprintf(key, sizeof(key), "zcc/pref-%c/%d", i % 2 ? 'c' : 'b', i);
		memset(dst, 0, PREF_LEN);
		got = lunar_get_into(cb, key, dst, PREF_LEN);
		if (i % 2) {
			/* On the dead proxy: an error, quickly, never bytes. */
			H_ASSERT_MSG(got < 0, "%s, put preferring C, read %lld bytes after C died",
				     key, (long long)got);
			H_ASSERT_MSG(h_now_ms() - t0 < 5000, "%s: failing read took %llu ms", key,
				     (unsigned long long)(h_now_ms() - t0));
			lost++;
			lost_rc = got;
			continue;
		}
		H_ASSERT_MSG(got == PREF_LEN, "%s, put preferring B: get = %lld (%s)", key,
			     (long long)got, h_code(got));
		H_ASSERT(h_verify(dst, PREF_LEN, h_seed(key)) < 0);
	}
	print_message("preferred segments: %d keys on B read back, %d keys on C gone with it "
		      "(%s)\n",
		      NPREF, lost, h_code(lost_rc));
}

LUNAR_TEST_MAIN(setup, teardown, test_zero_copy_cluster_register_both_sides,
		test_zero_copy_cluster_put_on_a_get_on_b, test_zero_copy_cluster_mixed_iovecs,
		test_zero_copy_cluster_preferred_segment_placement)
