/*
 * test_loop_stalls.c - work one client can make slow never runs on the
 * proxy's loop, so another client's calls go on meanwhile (SPEC §5: one
 * misbehaving client never hurts another).
 * - A descriptor a client sends is closed off the loop: a TCP socket with
 *   SO_LINGER and unsent data blocks its last close for the linger time.
 *   The proxy disarms such a socket as it closes it; one nested in a UNIX
 *   socket's queue it cannot, and it interrupts that close: sixteen of them
 *   hold up neither the closes of other clients' descriptors, nor the
 *   proxy's stop.
 * - A remove by regex, which visits every key, runs off the loop.
 * - With an embedded master, a put that may wait for an eviction round
 *   (it cannot fit in the memory left) runs off the loop, while gets stay
 *   on it; with room again, puts run on the loop again.
 * - A client that keeps its ring full of the largest batches (1024 keys of
 *   4 KiB) gets one decoded a round, and BUSY without decoding once it has
 *   8192 keys in flight: another client's calls go on, and the proxy's
 *   memory stays bounded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "atomic.h"
#include "harness.h"
#include "harness_raw.h"
#include "http_get.h"
#include "ring.h"
#include "uds.h"
#include "tests/cmocka_main.h"

#define VICTIM	    "stalls/victim"
#define STALL_MS    1000 /* another client's call must take less */
#define LONG_KEYS   600
#define REGEX_MS    120000 /* the remover's timeout: a sanitizer slows it 10x */
#define LONG_KEY_AS 3990

#define BLOCK_S	 60 /* a blocker's close lingers this long */
#define SESSIONS 40 /* client sessions opened and closed behind it */
#define BLOCKERS 16 /* as many as the proxy has closing threads */

static char sock[PATH_MAX];
static struct h_proc *proxy;

static int setup(void **state)
{
	(void)state;
	proxy = h_embedded_node(sock, NULL, "--segment-size", "16MiB", NULL);
	return proxy ? 0 : -1;
}

/* The victim's get, timed; fails the test when it was held up. */
static void victim_get(struct lunar_client *b, const char *what)
{
	char got[64];
	uint64_t t0 = h_now_ms(), ms;

	H_ASSERT_EQ(lunar_get_into(b, VICTIM, got, sizeof(got)), (int64_t)sizeof(got));
	ms = h_now_ms() - t0;
	H_ASSERT_MSG(ms < STALL_MS, "another client's get took %llu ms while %s",
		     (unsigned long long)ms, what);
}

static void test_loop_stalls_lingering_descriptor_closed_off_the_loop(void **state)
{
	struct lunar_client *b = h_client(sock);
	char v[64] = "victim";
	struct raw evil;
	int peer;

	(void)state;
	H_ASSERT_EQ(lunar_put(b, VICTIM, v, sizeof(v), NULL), 0);
	/* Given: a client registers "memory" that is a lingering socket, and
	 * drops its own copy, so the proxy's close is the last one */
	raw_open(&evil, sock);
	raw_register_blocker(&evil, 10, &peer);
	h_sleep_ms(200);
	/* Then: the registration was refused and another client is served */
	victim_get(b, "the proxy closed a lingering socket");
	/* and the proxy's close ends once the socket's peer goes */
	close(peer);
	raw_close(&evil);
	lunar_close(b);
}

/* A TCP socket sent to the proxy, lingering with unsent data: the proxy's
 * close is abortive, so its peer sees the reset at once, not after the
 * sender's linger time. */
static void test_loop_stalls_sent_socket_disarmed(void **state)
{
	struct raw evil;
	struct pollfd p = {.events = 0}; /* unread data is there: wait for the reset alone */
	int peer;

	(void)state;
	raw_open(&evil, sock);
	raw_register_last(&evil, raw_close_blocker(BLOCK_S, &peer));
	p.fd = peer;
	H_ASSERT_MSG(poll(&p, 1, 2000) == 1 && (p.revents & (POLLERR | POLLHUP)),
		     "no reset within 2 s (revents %#x): the close lingers", (unsigned)p.revents);
	close(peer);
	raw_close(&evil);
}

/* The same socket, armed again by its sender (on its own descriptor of
 * it) while the proxy holds it, and only then handed over
 * for good: the proxy disarms it only as it closes it. */
static void test_loop_stalls_sent_socket_rearmed(void **state)
{
	struct lc_reg_req q = {
	    .magic = LC_REG_MAGIC, .op = LC_REG_ADD, .length = 4096, .cookie = 1};
	struct linger lg = {.l_onoff = 1, .l_linger = BLOCK_S};
	struct pollfd p = {.events = 0};
	struct raw evil;
	int peer, fd;

	(void)state;
	raw_open(&evil, sock);
	fd = raw_close_blocker(BLOCK_S, &peer);
	H_ASSERT_EQ(lc_uds_send(evil.sock, &q, 1, &fd, 1), 0);
	h_sleep_ms(200); /* the proxy has taken the descriptor and disarmed it */
	H_ASSERT(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
	close(fd);
	H_ASSERT_EQ(lc_uds_send(evil.sock, (const char *)&q + 1, sizeof(q) - 1, NULL, 0), 0);
	p.fd = peer;
	H_ASSERT_MSG(poll(&p, 1, 2000) == 1 && (p.revents & (POLLERR | POLLHUP)),
		     "no reset within 2 s (revents %#x): the close lingers", (unsigned)p.revents);
	close(peer);
	raw_close(&evil);
}

/* Sessions opened and closed after one client sent as many blocking
 * descriptors as the proxy has closing threads: the proxy's descriptors for
 * them are closed all the same (the blocked closes are interrupted). */
static void test_loop_stalls_stuck_closes_interrupted(void **state)
{
	struct raw evil;
	int peers[BLOCKERS], base, now = -1;

	(void)state;
	raw_open(&evil, sock);
	h_sleep_ms(100);
	base = h_pid_fd_count(proxy->pid);
	for (int i = 0; i < BLOCKERS; i++)
		raw_register_blocker(&evil, BLOCK_S, &peers[i]);
	for (int i = 0; i < SESSIONS; i++) {
		struct lunar_client *c = h_client(sock);

		H_ASSERT_EQ(lunar_put(c, "stalls/cycle", "v", 1, NULL), 0);
		lunar_close(c);
	}
	for (int t = 0; t < 30 && (now = h_pid_fd_count(proxy->pid)) > base; t++)
		h_sleep_ms(100);
	print_message("proxy descriptors: %d before, %d after %d sessions behind %d stuck closes\n",
		      base, now, SESSIONS, BLOCKERS);
	H_ASSERT_MSG(now <= base, "%d descriptors left open behind stuck closes", now - base);
	for (int i = 0; i < BLOCKERS; i++)
		close(peers[i]);
	raw_close(&evil);
}

/* One stuck close on a quiet proxy, its only closing thread's: interrupted
 * all the same (the thread's own timer), so it does not last the client's
 * linger time (3 s here, which the proxy would log). */
static void test_loop_stalls_lone_stuck_close_interrupted(void **state)
{
	struct h_proc *p;
	char s2[PATH_MAX], line[256];
	struct raw evil;
	int peer;

	(void)state;
	snprintf(s2, sizeof(s2), "%s", h_path("lone.sock"));
	p = h_start_proxy("lone", s2, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(p != NULL);
	raw_open(&evil, s2);
	raw_register_blocker(&evil, 3, &peer);
	h_sleep_ms(3500);
	H_ASSERT_MSG(
	    hg_log_find(p->log, "closing a client's descriptor took", line, sizeof(line)) != 0,
	    "the close lasted the linger time:%s", line);
	close(peer);
	raw_close(&evil);
	h_stop(p);
}

/* A stop does not wait for a client's stuck close (it used to wait for
 * the closer thread, as long as the close lasted). */
static void test_loop_stalls_stop_past_a_stuck_close(void **state)
{
	struct h_proc *p;
	char s2[PATH_MAX];
	struct raw evil;
	uint64_t t0, ms;
	int peer, st;

	(void)state;
	snprintf(s2, sizeof(s2), "%s", h_path("stop.sock"));
	p = h_start_proxy("stop", s2, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(p != NULL);
	raw_open(&evil, s2);
	raw_register_blocker(&evil, BLOCK_S, &peer);
	h_sleep_ms(300);
	t0 = h_now_ms();
	H_ASSERT(kill(p->pid, SIGTERM) == 0);
	st = h_wait_exit(p, 10000);
	ms = h_now_ms() - t0;
	print_message("stopped in %llu ms with a close stuck\n", (unsigned long long)ms);
	H_ASSERT_MSG(st != -1 && ms < 5000, "the proxy took %llu ms to stop (status %d)",
		     (unsigned long long)ms, st);
	close(peer);
	raw_close(&evil);
}

struct victim {
	struct lunar_client *c;
	atomic_bool stop;
	uint64_t calls, longest_ms;
};

/* Another client's exists, over and over, each timed. */
static void *victim_loop(void *arg)
{
	struct victim *v = arg;

	while (!atomic_load(&v->stop)) {
		uint64_t t0 = h_now_ms(), ms;

		H_ASSERT_EQ(lunar_exists(v->c, VICTIM), 1);
		ms = h_now_ms() - t0;
		v->longest_ms = ms > v->longest_ms ? ms : v->longest_ms;
		v->calls++;
		h_sleep_ms(1);
	}
	return NULL;
}

/* The proxy's peak resident memory, KiB. */
static long proxy_hwm_kib(void)
{
	char path[64], line[128];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)proxy->pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

static void test_loop_stalls_ring_full_of_largest_batches(void **state)
{
	enum { KEYS = 1024, FLOOD_MS = 2000 };
	static char key[4096];
	static struct lc_item items[KEYS];
	struct victim v = {.c = h_client(sock)};
	uint64_t koff, aoff, end, pushed = 0;
	uint32_t tail = 0;
	long hwm0, hwm;
	struct raw evil;
	pthread_t th;

	(void)state;
	H_ASSERT_EQ(lunar_put(v.c, VICTIM, "v", 1, NULL), 0);
	/* Given: every ring entry names the same 1024 keys of 4 KiB */
	raw_open(&evil, sock);
	memset(key, 'a', sizeof(key));
	koff = raw_put(&evil, key, sizeof(key));
	for (int i = 0; i < KEYS; i++)
		items[i] = (struct lc_item){.key_off = koff, .key_len = sizeof(key)};
	aoff = raw_put(&evil, items, sizeof(items));
	for (uint32_t e = 0; e < evil.h.ring_entries; e++)
		evil.sqes[e] = (struct lc_sqe){.op = LC_OP_EXISTS,
					       .slot = e % evil.h.slot_count,
					       .count = KEYS,
					       .arg_off = aoff,
					       .arg_len = sizeof(items),
					       .seq = e};
	hwm0 = proxy_hwm_kib();
	H_ASSERT(pthread_create(&th, NULL, victim_loop, &v) == 0);
	/* When: it publishes them all again whenever the proxy took them */
	for (end = h_now_ms() + FLOOD_MS; h_now_ms() < end;) {
		if (LC_READ_ONCE(evil.ring->cons_head) != tail) {
			h_sleep_ms(0);
			continue;
		}
		tail += evil.h.ring_entries;
		pushed += evil.h.ring_entries;
		lc_store_release(&evil.ring->prod_tail, tail);
		raw_kick(&evil);
	}
	atomic_store(&v.stop, true);
	H_ASSERT(pthread_join(th, NULL) == 0);
	hwm = proxy_hwm_kib();
	print_message("%llu batches published; victim: %llu calls, longest %llu ms; proxy peak "
		      "memory %ld -> %ld KiB\n",
		      (unsigned long long)pushed, (unsigned long long)v.calls,
		      (unsigned long long)v.longest_ms, hwm0, hwm);
	/* Then: the other client was served all along, and memory stayed bounded */
	/* A bound on a wait: three times longer under a sanitizer (harness.h). */
	H_ASSERT_MSG(v.longest_ms < (uint64_t)H_BOUND_MS(300),
		     "another client's exists took %llu ms (bound %d ms)",
		     (unsigned long long)v.longest_ms, H_BOUND_MS(300));
	/* A sanitizer's allocator keeps freed memory for a while (quarantine). */
	if (getenv("LUNAR_TEST_SANITIZER"))
		print_message("the proxy's growth is not checked under %s\n",
			      getenv("LUNAR_TEST_SANITIZER"));
	else
		H_ASSERT_MSG(hwm - hwm0 < 256 * 1024, "the proxy grew by %ld KiB", hwm - hwm0);
	raw_close(&evil);
	lunar_close(v.c);
}

struct regex_call {
	struct lunar_client *c;
	int64_t rc;
	atomic_bool done;
};

static void *remove_regex(void *arg)
{
	struct regex_call *rx = arg;

	/* Allowed (its automaton is small) yet ~9 ms per 4000-byte key. */
	rx->rc = lunar_remove_by_regex(rx->c, "(a{0,14}){0,14}z", 1);
	atomic_store(&rx->done, true);
	return NULL;
}

static void test_loop_stalls_remove_by_regex_runs_off_the_loop(void **state)
{
	struct lunar_client *a = h_client_try(sock, REGEX_MS, NULL), *b = h_client(sock);
	struct regex_call rx = {.c = a, .rc = -1, .done = false};
	char v[64] = "victim", key[LONG_KEY_AS + 16];
	pthread_t th;

	(void)state;
	H_ASSERT(a != NULL);
	/* Given: keys on which a pattern takes seconds in all */
	memset(key, 'a', LONG_KEY_AS);
	for (int i = 0; i < LONG_KEYS; i++) {
		snprintf(key + LONG_KEY_AS, sizeof(key) - LONG_KEY_AS, "-%d", i);
		H_ASSERT_EQ(lunar_put(a, key, v, 1, NULL), 0);
	}
	H_ASSERT_EQ(lunar_put(b, VICTIM, v, sizeof(v), NULL), 0);
	/* When: one client removes by that pattern */
	H_ASSERT(pthread_create(&th, NULL, remove_regex, &rx) == 0);
	h_sleep_ms(200);
	/* Then: another client is served meanwhile */
	victim_get(b, "a remove by regex ran");
	H_ASSERT_MSG(!atomic_load(&rx.done), "the remove ended before the get: no test");
	H_ASSERT(pthread_join(th, NULL) == 0);
	H_ASSERT_EQ(rx.rc, 0);
	H_ASSERT_EQ(lunar_exists(a, key), 1);
	lunar_close(a);
	lunar_close(b);
}

/* Requests the proxy with HTTP port port ran on its event loop. */
static int64_t inline_runs(int port)
{
	static char text[1 << 16];

	H_ASSERT_EQ(hg_get(port, "/metrics", text, sizeof(text)), 200);
	return hg_metric(text, "lunar_proxy_requests_inline_total");
}

#define PINNED_SIZE (64u << 10)
#define PINNED_MAX  200 /* more than the 8 MiB segment holds */

static void test_loop_stalls_put_that_cannot_fit_runs_off_the_loop(void **state)
{
	static unsigned char v[PINNED_SIZE];
	struct lunar_put_cfg pin = {.replica_num = 1, .hard_pin = 1};
	char node_sock[PATH_MAX], key[32];
	struct lunar_client *c;
	struct h_proc *node;
	int64_t n;
	int port, pinned;

	(void)state;
	snprintf(node_sock, sizeof(node_sock), "%s", h_path("watermark.sock"));
	node = h_start_proxy("watermark", node_sock, H_EMBEDDED, "--segment-size", "8MiB",
			     "--eviction-high-watermark-ratio", "1.0", NULL);
	H_ASSERT(node != NULL);
	port = hg_log_http_port(node->log);
	c = h_client(node_sock);
	n = inline_runs(port);
	H_ASSERT_EQ(lunar_put(c, "small-0", v, 4096, NULL), 0);
	H_ASSERT_EQ(inline_runs(port), n + 1);
	H_ASSERT_EQ(lunar_remove(c, "small-0", 1), 0);
	/* Given: a segment full of hard-pinned values, which no round evicts
	 * (less than one value's room left) */
	for (pinned = 0; pinned < PINNED_MAX; pinned++) {
		snprintf(key, sizeof(key), "pinned-%d", pinned);
		if (lunar_put(c, key, v, sizeof(v), &pin))
			break;
	}
	H_ASSERT(pinned > 0 && pinned < PINNED_MAX);
	/* When: a put that cannot fit, which runs an eviction round */
	n = inline_runs(port);
	H_ASSERT(lunar_put(c, "over", v, sizeof(v), NULL) < 0);
	/* Then: a worker ran it, and a get still runs on the loop */
	H_ASSERT_EQ(inline_runs(port), n);
	H_ASSERT_EQ(lunar_get_into(c, "pinned-0", v, sizeof(v)), (int64_t)sizeof(v));
	H_ASSERT_EQ(inline_runs(port), n + 1);
	/* With room again, puts run on the loop again */
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "pinned-%d", i);
		H_ASSERT_EQ(lunar_remove(c, key, 1), 0);
	}
	n = inline_runs(port);
	H_ASSERT_EQ(lunar_put(c, "small-1", v, 4096, NULL), 0);
	H_ASSERT_EQ(inline_runs(port), n + 1);
	lunar_close(c);
	H_ASSERT_EQ(h_stop(node), 0);
}

LUNAR_TEST_MAIN(setup, h_teardown, test_loop_stalls_lingering_descriptor_closed_off_the_loop,
		test_loop_stalls_sent_socket_disarmed, test_loop_stalls_sent_socket_rearmed,
		test_loop_stalls_stuck_closes_interrupted,
		test_loop_stalls_lone_stuck_close_interrupted,
		test_loop_stalls_stop_past_a_stuck_close,
		test_loop_stalls_ring_full_of_largest_batches,
		test_loop_stalls_remove_by_regex_runs_off_the_loop,
		test_loop_stalls_put_that_cannot_fit_runs_off_the_loop)
