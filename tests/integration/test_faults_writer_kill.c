/*
 * test_faults_writer_kill.c - a writer *application* SIGKILLed after its
 * PutStart (SPEC §3, §5.6): its proxy W holds the put between PutStart and
 * PutEnd (--debug-put-delay 60s) while the bytes sit in proxy B's segment.
 * W sees the application's socket hang up and revokes at once, so the
 * space comes back within 2 s, far under the master's
 * --put-start-release-timeout (60 s here), and the key never appears; a
 * batch of keys is revoked the same way. Only a SIGKILLed *proxy* waits for
 * the release timeout (test_faults_preempt.c). Each case ends with W still
 * serving (a value put through B read through W), then, W stopped, the
 * harness's aftermath on B and the master.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case_util.h"
#include "harness_after.h"

#define MIB	   (1024u * 1024u)
#define LEN	   (8u * MIB)
#define NBATCH	   4
#define KEY	   "faults/writer-kill"
#define USED	   "lunar_master_segment_used_bytes"
#define RELEASE_MS 60000
#define BACK_MS	   2000 /* the space must be back within this of the kill */

static char sock_w[PATH_MAX], sock_b[PATH_MAX];
static struct h_proc *master, *proxy_w, *proxy_b;
static int mhttp;
static struct h_after after;

static int setup(void **state)
{
	int port = h_free_port();

	if (case_setup(state))
		return -1;
	master = track(h_start_master("master", port, "--put-start-discard-timeout", "30s",
				      "--put-start-release-timeout", "60s", NULL));
	if (!master)
		return -1;
	mhttp = http_port_of(master);
	h_named_sock(sock_b, "b");
	h_named_sock(sock_w, "w");
	/* B's apps (the aftermath's client) remove by force: admin calls. */
	proxy_b = track(h_start_proxy("proxyB", sock_b, port, "--segment-size", "64MiB",
				      "--admin-calls", NULL));
	/* W contributes no DRAM: its puts land on B's segment. */
	proxy_w = track(h_start_proxy("proxyW", sock_w, port, "--segment-size", "0",
				      "--debug-put-delay", "60s", NULL));
	return proxy_b && proxy_w ? 0 : -1;
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	return case_teardown(state);
}

static void key_of(char *out, size_t cap, int i)
{
	snprintf(out, cap, KEY "/%d", i);
}

/* The doomed application: one put, or a batch of NBATCH, through W. */
static void child_put(int ready_fd, void *arg)
{
	int batch = *(const int *)arg, n = batch ? NBATCH : 1, rc;
	char names[NBATCH][64];
	const char *keys[NBATCH];
	struct iovec iov[NBATCH];
	const struct iovec *iovs[NBATCH];
	int iovcnts[NBATCH], results[NBATCH];
	struct lunar_client *c;
	uint8_t *buf = malloc((size_t)n * LEN);

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	c = h_client_try(sock_w, 120000, &rc);
	if (!c || !buf)
		_exit(2);
	for (int i = 0; i < n; i++) {
		key_of(names[i], sizeof(names[i]), i);
		keys[i] = names[i];
		iov[i] = (struct iovec){buf + (size_t)i * LEN, LEN};
		iovs[i] = &iov[i];
		iovcnts[i] = 1;
		h_fill(iov[i].iov_base, LEN, h_seed(names[i]));
	}
	if (write(ready_fd, "R", 1) != 1)
		_exit(2);
	rc = batch ? lunar_batch_put(c, (size_t)n, keys, iovs, iovcnts, NULL, results)
		   : lunar_put(c, keys[0], buf, LEN, NULL);
	_exit(rc == 0 ? 3 : 4); /* only reached if the kill came too late */
}

/* Whether the master knows key, PROCESSING or not. */
static int master_has(const char *key)
{
	char path[256];
	int st;

	snprintf(path, sizeof(path), "/admin/stat?tenant=default&key=%s", key);
	st = hg_get(mhttp, path, text, TEXT_MAX);
	H_ASSERT_MSG(st == 200 || st == 404, "/admin/stat: %d", st);
	return st == 200;
}

/* Bytes used above the baseline, the background client paused. */
static int64_t used_now(void)
{
	int64_t used;

	h_after_pause(&after);
	used = h_metric_sum(mhttp, USED) - after.used;
	h_after_resume(&after);
	return used;
}

static void writer_killed(int batch)
{
	int n = batch ? NBATCH : 1;
	uint64_t end, t_kill, back = 0;
	struct lunar_client *cw, *cb;
	char key[64];
	int status;
	pid_t child;

	h_after_begin(&after, sock_b, proxy_b, mhttp);
	child = h_fork_ready(child_put, &batch, NULL);
	H_ASSERT(child > 0);
	/* Every PutStart reached the master and its bytes are held on B. */
	end = h_now_ms() + H_BOUND_MS(10000);
	while (used_now() < (int64_t)n * LEN && h_now_ms() < end)
		h_sleep_ms(20);
	H_ASSERT_MSG(used_now() >= (int64_t)n * LEN, "the writer's puts hold %lld bytes, not %lld",
		     (long long)used_now(), (long long)n * LEN);
	H_ASSERT_MSG(waitpid(child, &status, WNOHANG) == 0, "the writer ended (status 0x%x)",
		     status);
	t_kill = h_now_ms();
	kill(child, SIGKILL);
	H_ASSERT_EQ(waitpid(child, &status, 0), child);
	/* W saw the hang-up and revoked: the space is back at once. */
	end = t_kill + (uint64_t)H_BOUND_MS(BACK_MS);
	do {
		if (used_now() == 0) {
			back = h_now_ms();
			break;
		}
		h_sleep_ms(10);
	} while (h_now_ms() < end);
	H_ASSERT_MSG(back,
		     "%lld bytes still held %d ms after the writer's kill (release "
		     "timeout %d ms)",
		     (long long)used_now(), H_BOUND_MS(BACK_MS), RELEASE_MS);
	printf("  %d put(s) of %u MiB: space back %llu ms after the writer's SIGKILL (release "
	       "timeout %d ms)\n",
	       n, LEN / MIB, (unsigned long long)(back - t_kill), RELEASE_MS);
	cw = h_client(sock_w);
	for (int i = 0; i < n; i++) {
		key_of(key, sizeof(key), i);
		H_ASSERT_MSG(!master_has(key), "%s is still known to the master", key);
		H_ASSERT_EQ(lunar_exists(cw, key), 0);
	}
	/* W keeps serving: a value put through B is read through W. */
	cb = h_client(sock_b);
	H_ASSERT_EQ(h_put_seeded(cb, KEY "/after", 4096, h_seed(KEY "/after"), NULL), 0);
	h_expect_seeded(cw, KEY "/after", 4096, h_seed(KEY "/after"));
	H_ASSERT_EQ(lunar_remove(cb, KEY "/after", 1), 0);
	lunar_close(cb);
	lunar_close(cw);
	/* W's data connections to B end with it: B's descriptors, as the
	 * aftermath compares them, are those of before W wrote. */
	H_ASSERT(h_alive(proxy_w));
	H_ASSERT_EQ(h_stop(proxy_w), 0);
	h_after_end(&after);
}

static void test_faults_writer_kill_put_revoked_at_once(void **state)
{
	(void)state;
	writer_killed(0);
}

static void test_faults_writer_kill_batch_revoked_at_once(void **state)
{
	(void)state;
	writer_killed(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_faults_writer_kill_put_revoked_at_once, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_faults_writer_kill_batch_revoked_at_once, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
