/*
 * test_faults_disk_full.c - the SSD tier on a file system that is really
 * full (SPEC §8): a 24 MiB tmpfs the test mounts (as root; skipped, saying
 * why, when mount is not permitted), nearly filled by a file of the test's,
 * under a proxy whose --disk-capacity is far larger, so the writes fail
 * with ENOSPC rather than the tier's own accounting saying no. Puts go on
 * working from DRAM, the failures are counted
 * (lunar_proxy_disk_offload_failures_total), and once the test deletes its
 * file, offload resumes: new objects reach the disk again. The aftermath
 * holds on the proxy throughout.
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "case_util.h"
#include "harness_after.h"

#define MIB	 (1024u * 1024u)
#define LEN	 (1u * MIB)
#define OFFLOADS "lunar_proxy_disk_offloads_total"
#define FAILURES "lunar_proxy_disk_offload_failures_total"

static char sock[PATH_MAX], mnt[PATH_MAX], filler[PATH_MAX + 8];
static int mounted;
static struct h_proc *proxy;
static int http;
static struct h_after after;

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	snprintf(mnt, sizeof(mnt), "%s", h_path("tmpfs"));
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	h_named_sock(sock, "full");
	return mkdir(mnt, 0700);
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	while (ntracked > 0) /* the proxy first: it holds files there */
		h_stop(tracked[--ntracked]);
	if (mounted)
		umount2(mnt, MNT_DETACH);
	mounted = 0;
	return case_teardown(state);
}

/* Fill the file system but for left bytes. */
static void fill_but(uint64_t left)
{
	static char block[MIB];
	struct statvfs vfs;
	int fd = open(filler, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	H_ASSERT(fd >= 0);
	for (;;) {
		H_ASSERT(statvfs(mnt, &vfs) == 0);
		if ((uint64_t)vfs.f_bavail * vfs.f_frsize <= left + sizeof(block))
			break;
		H_ASSERT(write(fd, block, sizeof(block)) == (ssize_t)sizeof(block));
	}
	close(fd);
}

static int64_t wait_metric(const char *name, int64_t above, unsigned ms)
{
	uint64_t end = h_now_ms() + ms;
	int64_t v;

	while ((v = h_metric_sum(http, name)) <= above && h_now_ms() < end)
		h_sleep_ms(20);
	return v;
}

static void test_faults_disk_full_then_freed(void **state)
{
	uint8_t *buf = malloc(LEN);
	struct lunar_client *c;
	int64_t fails, done;
	char key[64];
	int i;

	(void)state;
	H_ASSERT(buf != NULL);
	if (mount("lunar-test", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=24m,mode=0700")) {
		printf("skipped: cannot mount a tmpfs here (%s); a real full file system needs "
		       "it\n",
		       strerror(errno));
		free(buf);
		skip();
	}
	mounted = 1;
	proxy = track(h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "48MiB",
				    "--disk-dir", mnt, "--disk-capacity", "256MiB", "--offload",
				    "on_put", "--ping-interval", "100ms", NULL));
	H_ASSERT(proxy != NULL);
	http = http_port_of(proxy);
	c = h_client(sock);
	/* One object on disk: the bucket's files exist, in the baseline. */
	put_seeded(c, "full/first", buf, LEN, 1, NULL);
	H_ASSERT(wait_metric(OFFLOADS, 0, 10000) >= 1);
	lunar_close(c);
	h_after_begin(&after, sock, proxy, http);
	c = h_client(sock);
	fill_but(2 * MIB);
	fails = h_metric_sum(http, FAILURES);
	/* Full: puts still work (from DRAM), their SSD copies fail. */
	for (i = 0; i < 8 && h_metric_sum(http, FAILURES) == fails; i++) {
		snprintf(key, sizeof(key), "full/a%d", i);
		put_seeded(c, key, buf, LEN, h_seed(key), NULL);
		h_sleep_ms(100);
	}
	H_ASSERT_MSG(wait_metric(FAILURES, fails, 5000) > fails,
		     "no offload failure counted on a full file system");
	printf("  full: %d puts until an SSD copy failed (%lld failures)\n", i,
	       (long long)h_metric_sum(http, FAILURES));
	for (int k = 0; k < i; k++) {
		snprintf(key, sizeof(key), "full/a%d", k);
		check_seeded(c, key, buf, LEN, h_seed(key));
	}
	/* Space freed: offload resumes. */
	H_ASSERT(unlink(filler) == 0);
	h_sleep_ms(200);
	done = h_metric_sum(http, OFFLOADS);
	for (int k = 0; k < 4; k++) {
		snprintf(key, sizeof(key), "full/b%d", k);
		put_seeded(c, key, buf, LEN, h_seed(key), NULL);
	}
	H_ASSERT_MSG(wait_metric(OFFLOADS, done + 3, 10000) >= done + 4,
		     "offload did not resume: %lld SSD copies after freeing space, %lld before",
		     (long long)h_metric_sum(http, OFFLOADS), (long long)done);
	printf("  freed: %lld new SSD copies\n", (long long)(h_metric_sum(http, OFFLOADS) - done));
	H_ASSERT(lunar_remove_by_regex(c, "^full/[ab]", 1) >= 0);
	lunar_close(c);
	h_after_end(&after);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_faults_disk_full_then_freed, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
