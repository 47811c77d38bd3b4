/*
 * test_mc.c - the proxy's master client against a real nng REP socket that
 * plays a slow master: a call never outlives its timeout, however the time
 * is split between waiting for the master to come up and for its reply.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "clock.h"
#include "lunar.h"
#include "proxy/px_int.h"
#include "rpc.h"

#define CALL_TIMEOUT_MS 2000

/* A master that starts listening listen_ms after it is started and answers
 * the first request reply_ms after it arrives, with a well-formed reply. */
struct late_master {
	char url[128];
	unsigned listen_ms;
	unsigned reply_ms;
	uint64_t got_ms; /* when the request arrived, 0 if it did not */
	int served;	 /* 1 once the reply was sent */
	pthread_t thr;
};

static void *late_master_run(void *arg)
{
	struct late_master *lm = arg;
	const struct lp_method *mt;
	ProtobufCMessage *req, *rep;
	nng_socket s;
	nng_msg *msg;

	usleep(lm->listen_ms * 1000u);
	if (nng_rep0_open(&s))
		return NULL;
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 3000);
	if (nng_listen(s, lm->url, NULL, 0) || nng_recvmsg(s, &msg, 0)) {
		nng_close(s);
		return NULL;
	}
	lm->got_ms = lc_now_ms();
	if (!lp_request_unpack(nng_msg_body(msg), nng_msg_len(msg), &mt, &req)) {
		protobuf_c_message_free_unpacked(req, NULL);
		rep = lp_reply_new(mt->rep, 0, 1);
		nng_msg_clear(msg);
		if (rep && !nng_msg_realloc(msg, protobuf_c_message_get_packed_size(rep))) {
			protobuf_c_message_pack(rep, nng_msg_body(msg));
			usleep(lm->reply_ms * 1000u);
			lm->served = !nng_sendmsg(s, msg, 0);
			msg = NULL;
		}
		if (rep)
			protobuf_c_message_free_unpacked(rep, NULL);
	}
	if (msg)
		nng_msg_free(msg);
	usleep(200000); /* let the reply leave before the socket goes */
	nng_close(s);
	return NULL;
}

static void late_master_start(struct late_master *lm, unsigned listen_ms, unsigned reply_ms)
{
	static unsigned seq;

	snprintf(lm->url, sizeof(lm->url), "ipc:///tmp/lunar-test-mc-%d-%u", (int)getpid(), seq++);
	lm->listen_ms = listen_ms;
	lm->reply_ms = reply_ms;
	lm->got_ms = 0;
	lm->served = 0;
	assert_int_equal(pthread_create(&lm->thr, NULL, late_master_run, lm), 0);
}

/* One Ping through a fresh master client: its code and how long it took;
 * *t0 (if given) is when the call started. */
static int ping(const char *url, uint64_t *ms, uint64_t *start)
{
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	ProtobufCMessage *rep = NULL;
	struct px_mc *mc;
	uint64_t t0;
	int rc;

	assert_int_equal(px_mc_create(NULL, url, CALL_TIMEOUT_MS, NULL, AUTH_ROLE_NODE, &mc), 0);
	t0 = lc_now_ms();
	if (start)
		*start = t0;
	rc = px_mc_call(mc, LUNAR__METHOD__PING, &rq.base, &rep);
	*ms = lc_now_ms() - t0;
	if (!rc)
		protobuf_c_message_free_unpacked(rep, NULL);
	px_mc_destroy(mc);
	return rc;
}

/* The master answers well within the timeout: the call succeeds. */
static void test_mc_prompt_master_answers(void **state)
{
	struct late_master lm;
	uint64_t ms;

	(void)state;
	late_master_start(&lm, 0, 0);
	usleep(50000);
	assert_int_equal(ping(lm.url, &ms, NULL), 0);
	pthread_join(lm.thr, NULL);
	assert_true(lm.served);
	assert_true(ms < CALL_TIMEOUT_MS);
}

/* The master comes up 200 ms into the call and answers 1850 ms after the
 * request reached it: past the call's 2000 ms, but within 2000 ms of the
 * send. The receive used to get a fresh timeout after the send, so the call
 * took the late reply; it must time out at 2000 ms instead. The client
 * redials at most a second apart, so the request gets there in time. */
static void test_mc_send_and_receive_share_one_timeout(void **state)
{
	struct late_master lm;
	uint64_t ms, t0;
	int rc;

	(void)state;
	late_master_start(&lm, 200, 1850);
	rc = ping(lm.url, &ms, &t0);
	pthread_join(lm.thr, NULL);
	print_message(
	    "request reached the master at %lld ms; call: %s after %llu ms (timeout %u ms)\n",
	    lm.got_ms ? (long long)(lm.got_ms - t0) : -1LL, lunar_strerror(rc),
	    (unsigned long long)ms, CALL_TIMEOUT_MS);
	assert_true(lm.got_ms); /* else the case was not made: the master never heard */
	assert_int_equal(rc, LUNAR_ERR_RPC_TIMEOUT);
	assert_true(ms >= CALL_TIMEOUT_MS - 10);
	assert_true(ms < CALL_TIMEOUT_MS + 150);
}

/* No master at all: the call times out at its timeout, not later. */
static void test_mc_no_master_times_out(void **state)
{
	char url[128];
	uint64_t ms;

	(void)state;
	snprintf(url, sizeof(url), "ipc:///tmp/lunar-test-mc-%d-none", (int)getpid());
	assert_int_equal(ping(url, &ms, NULL), LUNAR_ERR_RPC_TIMEOUT);
	assert_true(ms >= CALL_TIMEOUT_MS - 10);
	assert_true(ms < CALL_TIMEOUT_MS + 150);
}

int main(void)
{
	nng_socket s;
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mc_prompt_master_answers),
	    cmocka_unit_test(test_mc_send_and_receive_share_one_timeout),
	    cmocka_unit_test(test_mc_no_master_times_out),
	};

	/* nng 1.5 sets itself up at its first socket, racily when two threads
	 * open their first at once (the test's master and client): once here. */
	if (nng_rep0_open(&s) || nng_close(s))
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
