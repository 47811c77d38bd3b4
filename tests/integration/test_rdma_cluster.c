/*
 * test_rdma_cluster.c - a keyed cluster moves its values between proxies
 * over RDMA when the host has an RDMA device (a NIC, or soft-RoCE: run by
 * tests/vm/test_rdma_vm.sh inside a machine that has one); else it prints
 * "skipped: no RDMA device" and exits 77. One lunar-master; proxy A
 * contributes no DRAM, so every value put through A lands on proxy B's
 * segment. Values of 4 KiB to 5 MiB put from the app's own buffer and from
 * its registered memfd, and from lunar_alloc memory, read back byte-exact
 * through A (from B's segment) and through B; A's /metrics counts each of
 * those transfers as rdma, none as tcp, and no fallback to TCP. Then B is
 * killed and A's app reads what it held: every get fails or is whole,
 * never other bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define KIB	   1024u
#define MIB	   (1024u * 1024u)
#define REGION_LEN (16u * MIB)
#define RDMA_XFERS "lunar_proxy_transfers_total{transport=\"rdma\"}"
#define TCP_XFERS  "lunar_proxy_transfers_total{transport=\"tcp\"}"
#define FALLBACKS  "lunar_proxy_rdma_fallbacks_total"

static const size_t sizes[] = {4 * KIB, 64 * KIB + 13, MIB, 5 * MIB + 7};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_b[H_SEG_NAME];
static struct h_proc *proxy_a, *proxy_b;
static struct lunar_client *ca, *cb;
static uint8_t *mem, *buf;
static int fd = -1;

static int setup(void **state)
{
	(void)state;
	if (h_remote_pair(sock_a, sock_b, seg_b, &proxy_a, &proxy_b))
		return -1;
	ca = h_client(sock_a);
	cb = h_client(sock_b);
	fd = memfd_create("rdma-app", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, REGION_LEN) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK))
		return -1;
	mem = mmap(NULL, REGION_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	buf = malloc(REGION_LEN);
	return ca && cb && mem != MAP_FAILED && buf ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	lunar_close(ca);
	lunar_close(cb);
	if (mem && mem != MAP_FAILED)
		munmap(mem, REGION_LEN);
	close(fd);
	free(buf);
	h_stop(proxy_a);
	h_stop(proxy_b);
	h_cleanup();
	return 0;
}

/* Put src (len bytes) under key through A, on B; read it back through A
 * into dst and through B into buf; both byte-exact. */
static void round_trip(const char *key, uint8_t *src, uint8_t *dst, size_t len)
{
	const struct lunar_put_cfg one = {.replica_num = 1};

	h_fill(src, len, h_seed(key));
	H_ASSERT_EQ(lunar_put(ca, key, src, len, &one), 0);
	memset(dst, 0, len);
	H_ASSERT_EQ(lunar_get_into(ca, key, dst, len), (int64_t)len);
	H_ASSERT_MSG(h_verify(dst, len, h_seed(key)) < 0, "%s via A: wrong byte at %lld", key,
		     (long long)h_verify(dst, len, h_seed(key)));
	memset(buf, 0, len);
	H_ASSERT_EQ(lunar_get_into(cb, key, buf, len), (int64_t)len);
	H_ASSERT_EQ(h_verify(buf, len, h_seed(key)), -1);
}

static void test_rdma_cluster_values_travel_over_rdma(void **state)
{
	int64_t before = h_metric(proxy_a, RDMA_XFERS), tcp = h_metric(proxy_a, TCP_XFERS);
	uint8_t *blk = lunar_alloc(ca, 6 * MIB);
	char key[64];
	int n = 0;

	(void)state;
	H_ASSERT(blk != NULL);
	H_ASSERT_EQ(lunar_register(ca, mem, REGION_LEN), 0);
	H_ASSERT_EQ(h_metric(proxy_a, "lunar_proxy_rdma_enabled"), 1);
	for (size_t i = 0; i < NSIZES; i++) {
		snprintf(key, sizeof(key), "rdma/heap-%zu", sizes[i]);
		round_trip(key, buf + REGION_LEN / 2, buf + REGION_LEN / 2, sizes[i]);
		snprintf(key, sizeof(key), "rdma/memfd-%zu", sizes[i]);
		round_trip(key, mem + 4 * KIB + 5, mem + 8 * MIB + 3, sizes[i]);
		snprintf(key, sizeof(key), "rdma/alloc-%zu", sizes[i]);
		round_trip(key, blk, blk, sizes[i]);
		n += 3;
	}
	lunar_free(ca, blk);
	print_message("A: %lld rdma transfers for %d puts and %d gets, %lld tcp, %lld fallbacks\n",
		      (long long)(h_metric(proxy_a, RDMA_XFERS) - before), n, n,
		      (long long)(h_metric(proxy_a, TCP_XFERS) - tcp),
		      (long long)h_metric(proxy_a, FALLBACKS));
	H_ASSERT(h_metric(proxy_a, RDMA_XFERS) - before >= 2 * n);
	H_ASSERT_EQ(h_metric(proxy_a, TCP_XFERS), tcp);
	H_ASSERT_EQ(h_metric(proxy_a, FALLBACKS), 0);
}

static void test_rdma_cluster_owner_stopped_mid_reads(void **state)
{
	const struct lunar_put_cfg one = {.replica_num = 1};
	int whole = 0, failed = 0;
	char key[64];

	(void)state;
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "rdma/stop-%d", i);
		h_fill(mem + (size_t)i * 2 * MIB, 2 * MIB, h_seed(key));
		H_ASSERT_EQ(lunar_put(ca, key, mem + (size_t)i * 2 * MIB, 2 * MIB, &one), 0);
	}
	H_ASSERT_EQ(kill(proxy_b->pid, SIGKILL), 0);
	for (int r = 0; r < 20; r++) {
		int64_t got;

		snprintf(key, sizeof(key), "rdma/stop-%d", r % 4);
		memset(buf, 0, 2 * MIB);
		got = lunar_get_into(ca, key, buf, 2 * MIB);
		if (got < 0) {
			failed++;
			continue;
		}
		H_ASSERT_EQ(got, 2 * MIB);
		H_ASSERT_MSG(h_verify(buf, 2 * MIB, h_seed(key)) < 0,
			     "%s after B's death: wrong byte at %lld", key,
			     (long long)h_verify(buf, 2 * MIB, h_seed(key)));
		whole++;
	}
	print_message("gets with B killed: %d whole, %d failed\n", whole, failed);
	H_ASSERT(failed > 0);
}

/* Whether libibverbs would find a device: /sys/class/infiniband_verbs
 * lists one uverbs entry per device. */
static int rdma_device_present(void)
{
	DIR *d = opendir("/sys/class/infiniband_verbs");
	struct dirent *e;
	int found = 0;

	while (d && (e = readdir(d)))
		found |= !strncmp(e->d_name, "uverbs", 6);
	if (d)
		closedir(d);
	return found;
}

int main(void)
{
	static const CMUnitTestFunction fns[] = {test_rdma_cluster_values_travel_over_rdma,
						 test_rdma_cluster_owner_stopped_mid_reads};

	if (!rdma_device_present()) {
		printf("skipped: no RDMA device\n");
		return 77;
	}
	return lunar_test_run("test_rdma_cluster_values_travel_over_rdma, "
			      "test_rdma_cluster_owner_stopped_mid_reads",
			      fns, 2, setup, teardown, NULL, NULL);
}
