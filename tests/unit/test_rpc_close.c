/*
 * test_rpc_close.c - closing a master RPC client while calls are out
 * (proto/rpc_client.c). A "master" that takes requests and never answers
 * holds four threads' calls (each with a 10 s timeout) in flight; the
 * client is closed under them, as a proxy closes the old leader's client
 * when it follows a new one. Every call fails at once, the close returns
 * within a second, and nothing crashes. 30 rounds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <time.h>

#include "clock.h"
#include "lunar.h"
#include "rpc_client.h"
#include "tests/cmocka_main.h"

#define CALLERS 4
#define ROUNDS	30

struct caller {
	pthread_t t;
	struct lp_client *c;
	int rc;
	uint64_t ms; /* how long its call took */
};

static void *call_main(void *arg)
{
	struct caller *k = arg;
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	ProtobufCMessage *rep = NULL;
	uint64_t t0 = lc_now_ms();

	k->rc = lp_client_call(k->c, lp_method_find(LUNAR__METHOD__PING), &rq.base, &rep, 10000);
	k->ms = lc_now_ms() - t0;
	return NULL;
}

static void test_rpc_close_with_calls_in_flight(void **state)
{
	char url[64];
	nng_socket silent;
	nng_listener l;
	int port;

	(void)state;
	assert_int_equal(nng_rep0_open_raw(&silent), 0); /* raw: takes, never answers */
	assert_int_equal(nng_listen(silent, "tcp://127.0.0.1:0", &l, 0), 0);
	assert_int_equal(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port), 0);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	for (int r = 0; r < ROUNDS; r++) {
		struct caller k[CALLERS];
		struct lp_client *c;
		uint64_t t0;

		assert_int_equal(lp_client_create(url, NULL, 0, LP_CLIENT_DIAL_NOW, &c), 0);
		for (int i = 0; i < CALLERS; i++) {
			k[i].c = c;
			assert_int_equal(pthread_create(&k[i].t, NULL, call_main, &k[i]), 0);
		}
		nanosleep(&(struct timespec){.tv_nsec = (r % 3) * 10000000L},
			  NULL); /* calls starting, sent, waiting */
		t0 = lc_now_ms();
		lp_client_close(c);
		assert_true(lc_now_ms() - t0 < 1000);
		for (int i = 0; i < CALLERS; i++) {
			pthread_join(k[i].t, NULL);
			assert_int_equal(k[i].rc, LUNAR_ERR_RPC_FAIL);
			assert_true(k[i].ms < 2000);
		}
		lp_client_destroy(c);
	}
	nng_close(silent);
}

LUNAR_TEST_MAIN(NULL, NULL, test_rpc_close_with_calls_in_flight)
