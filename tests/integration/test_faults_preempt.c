/*
 * test_faults_preempt.c - a writer stopped after PutStart (SPEC §3): a
 * real process, the writing proxy W, SIGSTOPped while it holds a put
 * between PutStart and PutEnd (--debug-put-delay). Before the master's
 * --put-start-discard-timeout another client's put of the key changes
 * nothing; after it, that put pre-empts W's (counted in
 * lunar_master_discarded_puts_total) and its bytes are what readers get; W's
 * space comes back at --put-start-release-timeout. SIGKILLed instead, W's
 * put is dropped once the master declares it dead (--client-ttl), and its
 * space again at the release timeout: the master learns of a dead proxy
 * only from its silence, and a silent one may still write. Each case ends with
 * the harness's aftermath on proxy B and the master.
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
#define LEN	   (4u * MIB)
#define KEY	   "faults/preempt"
#define USED	   "lunar_master_segment_used_bytes"
#define DISCARDED  "lunar_master_discarded_puts_total"
#define DISCARD_MS 2000
#define RELEASE_MS 6000

static char sock_w[PATH_MAX], sock_b[PATH_MAX];
static struct h_proc *master, *proxy_w, *proxy_b;
static int mhttp;
static struct h_after after;

static int start(const char *ttl)
{
	int port = h_free_port();

	master =
	    track(h_start_master("master", port, "--put-start-discard-timeout", "2s",
				 "--put-start-release-timeout", "6s", "--client-ttl", ttl, NULL));
	if (!master)
		return -1;
	mhttp = http_port_of(master);
	h_named_sock(sock_b, "b");
	h_named_sock(sock_w, "w");
	/* B's apps (the aftermath's client) remove by force: admin calls. */
	proxy_b = track(h_start_proxy("proxyB", sock_b, port, "--segment-size", "64MiB",
				      "--ping-interval", "100ms", "--admin-calls", NULL));
	/* W contributes no DRAM: its put lands on B's segment. */
	proxy_w =
	    track(h_start_proxy("proxyW", sock_w, port, "--segment-size", "0", "--ping-interval",
				"100ms", "--debug-put-delay", "60s", NULL));
	return proxy_b && proxy_w ? 0 : -1;
}

static int setup_long_ttl(void **state)
{
	return case_setup(state) ? -1 : start("60s");
}

static int setup_short_ttl(void **state)
{
	return case_setup(state) ? -1 : start("1s");
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	if (proxy_w && proxy_w->running)
		kill(-proxy_w->pid, SIGCONT);
	return case_teardown(state);
}

/* The writer's application: its put through W sits in W's delay. */
static void child_put(int ready_fd, void *arg)
{
	struct lunar_client *c;
	uint8_t *buf = malloc(LEN);
	int rc;

	(void)arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	c = h_client_try(sock_w, 120000, &rc);
	if (!c || !buf)
		_exit(2);
	h_fill(buf, LEN, h_seed("W's bytes"));
	if (write(ready_fd, "R", 1) != 1)
		_exit(2);
	rc = lunar_put(c, KEY, buf, LEN, NULL);
	_exit(rc == 0 ? 0 : 3);
}

/* Whether the master knows KEY, PROCESSING or not (the background client's
 * puts make any count of keys move). */
static int master_has_key(void)
{
	int st = hg_get(mhttp, "/admin/stat?tenant=default&key=" KEY, text, TEXT_MAX);

	H_ASSERT_MSG(st == 200 || st == 404, "/admin/stat: %d", st);
	return st == 200;
}

/* Start W's put and stop W inside it: the put-start time, the child. */
static uint64_t stopped_writer(pid_t *child)
{
	uint64_t t0 = h_now_ms(), end = t0 + 5000;

	*child = h_fork_ready(child_put, NULL, NULL);
	H_ASSERT(*child > 0);
	while (!master_has_key() && h_now_ms() < end)
		h_sleep_ms(5);
	H_ASSERT_MSG(master_has_key(), "W's PutStart never reached the master");
	H_ASSERT_EQ(h_stop_group(proxy_w), 0);
	return t0;
}

/* Wait until the master's used bytes are want (above the baseline). */
static uint64_t wait_used(int64_t want, uint64_t by_ms)
{
	uint64_t end = by_ms;
	int64_t used;

	do {
		used = h_metric_sum(mhttp, USED) - after.used;
		if (used == want)
			return h_now_ms();
		h_sleep_ms(20);
	} while (h_now_ms() < end);
	H_ASSERT_MSG(0, "%lld bytes used above the baseline, expected %lld", (long long)used,
		     (long long)want);
	return 0;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static void test_faults_preempt_after_discard_timeout(void **state)
{
	struct lunar_client *cb;
	uint8_t *buf = malloc(LEN);
	int64_t held, disc;
	uint64_t t0, freed;
	pid_t child;

	(void)state;
	H_ASSERT(buf != NULL);
	h_after_begin(&after, sock_b, proxy_b, mhttp);
	disc = h_metric_sum(mhttp, DISCARDED);
	t0 = stopped_writer(&child);
	h_after_pause(&after);
	held = h_metric_sum(mhttp, USED) - after.used;
	h_after_resume(&after);
	H_ASSERT_MSG(held >= LEN, "W's put holds %lld bytes", (long long)held);
	cb = h_client(sock_b);
	/* Inside the discard timeout the stopped put still owns the key. */
	h_fill(buf, LEN, h_seed("B's bytes"));
	H_ASSERT_EQ(lunar_put(cb, KEY, buf, LEN, NULL), 0);
	H_ASSERT_EQ(lunar_exists(cb, KEY), 0);
	H_ASSERT_EQ(h_metric_sum(mhttp, DISCARDED), disc);
	/* Past it, a put pre-empts it, and readers get that put's bytes. */
	while (h_now_ms() < t0 + DISCARD_MS + 200)
		h_sleep_ms(20);
	H_ASSERT_EQ(lunar_put(cb, KEY, buf, LEN, NULL), 0);
	H_ASSERT_EQ(h_metric_sum(mhttp, DISCARDED), disc + 1);
	check_seeded(cb, KEY, buf, LEN, h_seed("B's bytes"));
	/* W's range stays taken (W may wake and write) until the release. */
	h_after_pause(&after);
	H_ASSERT_EQ(h_metric_sum(mhttp, USED) - after.used, 2 * held);
	freed = wait_used(held, t0 + RELEASE_MS + 5000);
	h_after_resume(&after);
	printf("  W's %lld bytes freed %llu ms after its PutStart (release timeout %d ms)\n",
	       (long long)held, (unsigned long long)(freed - t0), RELEASE_MS);
	H_ASSERT(freed >= t0 + RELEASE_MS - 500);
	H_ASSERT_EQ(lunar_remove(cb, KEY, 1), 0);
	lunar_close(cb);
	h_kill(proxy_w);
	reap(child);
	h_after_end(&after);
	free(buf);
}

static void test_faults_stopped_writer_killed(void **state)
{
	uint64_t t0, t_kill, freed;
	pid_t child;

	(void)state;
	h_after_begin(&after, sock_b, proxy_b, mhttp);
	t0 = stopped_writer(&child);
	h_sleep_ms(200);
	t_kill = h_now_ms();
	h_kill(proxy_w);
	/* Dead for the master after --client-ttl 1s of silence: its put goes... */
	while (master_has_key() && h_now_ms() < t_kill + 4000)
		h_sleep_ms(20);
	printf("  W SIGKILLed %llu ms after PutStart; its put dropped %llu ms later\n",
	       (unsigned long long)(t_kill - t0), (unsigned long long)(h_now_ms() - t_kill));
	H_ASSERT(!master_has_key());
	/* ...but its range only at the release timeout: a proxy the master
	 * stopped hearing from may be stopped, not dead, and write later. */
	h_after_pause(&after);
	freed = wait_used(0, t0 + RELEASE_MS + 4000);
	h_after_resume(&after);
	printf("  its %u bytes came back %llu ms after its PutStart\n", LEN,
	       (unsigned long long)(freed - t0));
	reap(child);
	h_after_end(&after);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_faults_preempt_after_discard_timeout,
					    setup_long_ttl, teardown),
	    cmocka_unit_test_setup_teardown(test_faults_stopped_writer_killed, setup_short_ttl,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
