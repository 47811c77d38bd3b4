/*
 * hostile_util.h - what the test_hostile*.c binaries share: a well-behaved
 * client B running put/get/verify/remove in a thread for the whole test,
 * raw clients' requests, checks that a violator is cut off with a
 * "disconnected:" reason in the proxy's log, the group's proxy, and the
 * aftermath every binary ends with: B never failed, a new client works,
 * and every descriptor the hostile sessions took came back.
 */
#ifndef LUNAR_TESTS_INTEGRATION_HOSTILE_UTIL_H
#define LUNAR_TESTS_INTEGRATION_HOSTILE_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "atomic.h"
#include "harness.h"
#include "harness_raw.h"
#include "ring.h"
#include "shm_abi.h"
#include "uds.h"

#define HANGUP_MS  2000 /* a violator must be cut off within this */
#define B_STALL_MS 1000 /* longest B call tolerated while others misbehave */
#define B_MAX_LEN  (64u * 1024u)
#define FD_SLACK   2

static char sock[PATH_MAX];
static struct h_proc *proxy;
static int fd_baseline;

/* --- client B: a normal handle in a thread, never calling cmocka --- */

struct bstate {
	pthread_t th;
	struct lunar_client *c;
	atomic_bool stop;
	atomic_ullong ops;
	atomic_ullong errors;
	atomic_ullong max_ms; /* longest call since the last reset */
	char first_err[160];
};

static struct bstate b;

static inline void b_fail(uint64_t i, const char *what, int64_t rc)
{
	if (atomic_fetch_add(&b.errors, 1) == 0)
		snprintf(b.first_err, sizeof(b.first_err), "round %llu: %s returned %lld (%s)",
			 (unsigned long long)i, what, (long long)rc, h_code(rc));
}

static inline void b_timed(uint64_t start)
{
	unsigned long long ms = h_now_ms() - start, cur = atomic_load(&b.max_ms);

	while (ms > cur && !atomic_compare_exchange_weak(&b.max_ms, &cur, ms))
		;
}

static inline void *b_main(void *arg)
{
	uint8_t *buf = malloc(B_MAX_LEN), *out = malloc(B_MAX_LEN);
	char key[64];
	int64_t rc;

	(void)arg;
	for (uint64_t i = 0; buf && out && !atomic_load(&b.stop); i++) {
		size_t len = 1 + (size_t)((i * 7919u) % B_MAX_LEN);
		uint64_t t;

		snprintf(key, sizeof(key), "hostile-B/%llu", (unsigned long long)i);
		h_fill(buf, len, h_seed(key));
		t = h_now_ms();
		rc = lunar_put(b.c, key, buf, len, NULL);
		b_timed(t);
		if (rc) {
			b_fail(i, "put", rc);
			continue;
		}
		t = h_now_ms();
		rc = lunar_get_into(b.c, key, out, B_MAX_LEN);
		b_timed(t);
		if (rc != (int64_t)len)
			b_fail(i, "get_into", rc);
		else if (h_verify(out, len, h_seed(key)) >= 0)
			b_fail(i, "verify", 0);
		t = h_now_ms();
		rc = lunar_remove(b.c, key, 1);
		b_timed(t);
		if (rc)
			b_fail(i, "remove", rc);
		atomic_fetch_add(&b.ops, 1);
	}
	free(buf);
	free(out);
	return NULL;
}

/* A well-formed one-item request (key "k", nseg segments at seg_off). */
static inline struct lc_sqe raw_item_sqe(struct raw *c, uint16_t op, struct lc_item *it)
{
	struct lc_sqe q = {.op = op, .slot = 1, .count = 1, .seq = 7};

	q.arg_len = sizeof(*it);
	q.arg_off = raw_put(c, it, sizeof(*it));
	return q;
}

/* 1 once the proxy closed its end (EOF or reset), 0 after ms without. */
static inline int hung_up(int fd, int ms)
{
	uint64_t end = h_now_ms() + (uint64_t)ms;
	char buf[64];

	for (;;) {
		struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
		int64_t left = (int64_t)(end - h_now_ms());
		ssize_t n;

		if (left < 0)
			return 0;
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return 1;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return 1;
	}
}

/* The proxy log's reason line for client id, waiting up to ms; "" if none. */
static inline const char *log_reason(uint64_t id, int ms)
{
	static char reason[256];
	char needle[48], line[1024];
	uint64_t end = h_now_ms() + (uint64_t)ms;

	snprintf(needle, sizeof(needle), "client %llu ", (unsigned long long)id);
	do {
		FILE *f = fopen(proxy->log, "r");

		while (f && fgets(line, sizeof(line), f)) {
			char *d = strstr(line, "disconnected:");

			if (d && strstr(line, needle)) {
				snprintf(reason, sizeof(reason), "%s", d);
				reason[strcspn(reason, "\n")] = '\0';
				fclose(f);
				return reason;
			}
		}
		if (f)
			fclose(f);
		h_sleep_ms(20);
	} while (h_now_ms() < end);
	return "";
}

static inline void expect_cut_off(struct raw *c, const char *what)
{
	const char *why;

	H_ASSERT_MSG(hung_up(c->sock, HANGUP_MS), "%s: client %llu not disconnected within %d ms",
		     what, (unsigned long long)c->client_id, HANGUP_MS);
	why = log_reason(c->client_id, 1000);
	H_ASSERT_MSG(*why, "%s: no \"disconnected:\" line for client %llu in the proxy log", what,
		     (unsigned long long)c->client_id);
	printf("  %-34s -> %s\n", what, why);
	H_ASSERT(h_alive(proxy));
	raw_close(c);
}

/* --- fixtures and checks --- */

static inline uint64_t b_reset_max(void)
{
	return atomic_exchange(&b.max_ms, 0);
}

static inline void expect_b_healthy(const char *when)
{
	uint64_t ops = atomic_load(&b.ops), end = h_now_ms() + 5000;

	/* B is still making progress... */
	while (atomic_load(&b.ops) == ops && h_now_ms() < end)
		h_sleep_ms(5);
	H_ASSERT_MSG(atomic_load(&b.ops) > ops, "%s: client B made no progress for 5 s", when);
	/* ...and has not failed. */
	H_ASSERT_MSG(atomic_load(&b.errors) == 0, "%s: client B saw %llu errors, first: %s", when,
		     (unsigned long long)atomic_load(&b.errors), b.first_err);
}

/*
 * expect_b_unstalled - expect_b_healthy(when), then B's longest call since
 * the last b_reset_max() is printed ("  <when>: B's longest call N ms") and
 * must stay under B_STALL_MS, else "B stalled N ms <why>". Resets the maximum.
 */
static inline void expect_b_unstalled(const char *when, const char *why)
{
	uint64_t stall;

	expect_b_healthy(when);
	stall = b_reset_max();
	printf("  %s: B's longest call %llu ms\n", when, (unsigned long long)stall);
	H_ASSERT_MSG(stall < B_STALL_MS, "B stalled %llu ms %s", (unsigned long long)stall, why);
}

static inline void expect_new_client_served(void)
{
	struct lunar_client *c = h_client(sock);

	H_ASSERT_EQ(lunar_health(c), 0);
	H_ASSERT_EQ(lunar_put(c, "hostile/new", "v", 1, NULL), 0);
	H_ASSERT_EQ(lunar_exists(c, "hostile/new"), 1);
	H_ASSERT_EQ(lunar_remove(c, "hostile/new", 1), 0);
	lunar_close(c);
}

static inline int setup(void **state)
{
	(void)state;
	proxy = h_embedded_node(sock, &b.c, "--segment-size", "64MiB", NULL);
	if (!proxy || pthread_create(&b.th, NULL, b_main, NULL) != 0)
		return -1;
	h_sleep_ms(200);
	fd_baseline = h_pid_fd_count(proxy->pid);
	printf("  proxy pid %d: %d descriptors with client B\n", (int)proxy->pid, fd_baseline);
	return fd_baseline > 0 ? 0 : -1;
}

static inline int teardown(void **state)
{
	(void)state;
	if (b.c) {
		atomic_store(&b.stop, true);
		pthread_join(b.th, NULL);
		lunar_close(b.c);
		b.c = NULL;
	}
	h_cleanup();
	return 0;
}

/* Last: B never failed, a new client works, and every descriptor the
 * hostile sessions took came back. */
static inline void hostile_aftermath(void)
{
	uint64_t end = h_now_ms() + 5000;
	int fds;

	expect_b_healthy("at the end");
	expect_new_client_served();
	do {
		fds = h_pid_fd_count(proxy->pid);
		if (fds == fd_baseline) /* settle fully if it will; ±FD_SLACK passes */
			break;
		h_sleep_ms(50);
	} while (h_now_ms() < end);
	printf("  proxy descriptors: %d (baseline %d); B: %llu rounds, 0 errors\n", fds,
	       fd_baseline, (unsigned long long)atomic_load(&b.ops));
	H_ASSERT_MSG(abs(fds - fd_baseline) <= FD_SLACK,
		     "proxy holds %d descriptors, %d before the hostile clients", fds, fd_baseline);
	atomic_store(&b.stop, true);
	pthread_join(b.th, NULL);
	H_ASSERT_MSG(atomic_load(&b.errors) == 0, "client B saw %llu errors, first: %s",
		     (unsigned long long)atomic_load(&b.errors), b.first_err);
	lunar_close(b.c);
	b.c = NULL;
}

/* test_hostile_aftermath - the cmocka test every test_hostile*.c lists last:
 * hostile_aftermath(). */
static inline void test_hostile_aftermath(void **state)
{
	(void)state;
	hostile_aftermath();
}

#endif /* LUNAR_TESTS_INTEGRATION_HOSTILE_UTIL_H */
