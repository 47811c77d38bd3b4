/*
 * test_step3_loop_stalls.c - work one client can make slow never runs on the
 * proxy's loop, so another client's calls go on meanwhile (SPEC §5: one
 * misbehaving client never hurts another).
 * - A descriptor a client sends is closed off the loop: a TCP socket with
 *   SO_LINGER and unsent data blocks its last close for the linger time.
 * - A remove by regex, which visits every key, runs off the loop.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "harness_raw.h"

#define VICTIM	    "stalls/victim"
#define STALL_MS    1000 /* another client's call must take less */
#define LONG_KEYS   600
#define LONG_KEY_AS 3990

static char sock[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	return h_embedded_node(sock, NULL, "--segment-size", "16MiB", NULL) ? 0 : -1;
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

static void test_lingering_descriptor_closed_off_the_loop(void **state)
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

static void test_remove_by_regex_runs_off_the_loop(void **state)
{
	struct lunar_client *a = h_client(sock), *b = h_client(sock);
	struct regex_call rx = { .c = a, .rc = -1, .done = false };
	char v[64] = "victim", key[LONG_KEY_AS + 16];
	pthread_t th;

	(void)state;
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lingering_descriptor_closed_off_the_loop),
	    cmocka_unit_test(test_remove_by_regex_runs_off_the_loop),
	};

	return cmocka_run_group_tests(tests, setup, h_teardown);
}
