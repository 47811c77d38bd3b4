/*
 * test_sp_req.c - the SP requester (proto/sp_req.c) against a real nng REP
 * socket, over tcp:// and ipc://, from several threads at once; against a
 * server that restarts (the pooled connection it shut is dropped, the next
 * call works on a new one and the drop is reported); a burst's extra
 * connections closed once they have idled a second; and against a raw TCP
 * server that lies, whose every lie fails the call (never a wrong reply):
 * another request's id, a length past the limit or under an id's, the end
 * of the stream half-way, a peer that is not a REP socket.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "sp_req.h"
#include "test_listen.h"
#include "tests/cmocka_main.h"

#define MAX_REPLY 4096
#define CALLERS	  4
#define CALLS	  200

/* --- an echo server: nng REP, answering on a thread of its own --- */

struct echo {
	nng_socket s;
	pthread_t t;
	char url[128];
	unsigned delay_us; /* before each answer */
};

static void *echo_main(void *arg)
{
	struct echo *e = arg;
	nng_msg *m;

	while (!nng_recvmsg(e->s, &m, 0)) {
		if (e->delay_us)
			usleep(e->delay_us);
		if (nng_sendmsg(e->s, m, 0))
			nng_msg_free(m);
	}
	return NULL;
}

static void echo_start(struct echo *e, const char *url)
{
	nng_listener l;
	int port;

	assert_int_equal(nng_rep0_open(&e->s), 0);
	assert_int_equal(nng_listen(e->s, url, &l, 0), 0);
	if (!strncmp(url, "tcp://", 6)) {
		assert_int_equal(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port), 0);
		snprintf(e->url, sizeof(e->url), "tcp://127.0.0.1:%d", port);
	} else {
		snprintf(e->url, sizeof(e->url), "%s", url);
	}
	assert_int_equal(pthread_create(&e->t, NULL, echo_main, e), 0);
}

static void echo_stop(struct echo *e)
{
	nng_close(e->s);
	pthread_join(e->t, NULL);
}

static int call(struct lp_spreq *r, const char *msg, char *out, uint64_t timeout_ms)
{
	void *rep = NULL;
	size_t len;
	int rc = lp_spreq_call(r, msg, strlen(msg), &rep, &len, lc_now_ms() + timeout_ms);

	if (!rc) {
		memcpy(out, rep, len);
		out[len] = '\0';
		free(rep);
	}
	return rc;
}

struct caller {
	pthread_t t;
	struct lp_spreq *r;
	int id, bad;
};

static void *caller_main(void *arg)
{
	struct caller *k = arg;
	char msg[64], got[MAX_REPLY + 1];

	for (int i = 0; i < CALLS; i++) {
		snprintf(msg, sizeof(msg), "caller %d call %d", k->id, i);
		if (call(k->r, msg, got, 5000) || strcmp(got, msg))
			k->bad++;
	}
	return NULL;
}

/* Every thread's every call gets its own request back. */
static void echo_from_threads(const char *url)
{
	struct caller k[CALLERS];
	struct lp_spreq *r;
	struct echo e;

	e.delay_us = 0;
	echo_start(&e, url);
	assert_int_equal(lp_spreq_alloc(e.url, MAX_REPLY, &r), 0);
	for (int i = 0; i < CALLERS; i++) {
		k[i] = (struct caller){.r = r, .id = i};
		assert_int_equal(pthread_create(&k[i].t, NULL, caller_main, &k[i]), 0);
	}
	for (int i = 0; i < CALLERS; i++) {
		pthread_join(k[i].t, NULL);
		assert_int_equal(k[i].bad, 0);
	}
	assert_true(lp_spreq_connections() >= 1);
	lp_spreq_free(r);
	assert_int_equal(lp_spreq_connections(), 0);
	echo_stop(&e);
}

static void test_sp_req_tcp_threads(void **state)
{
	(void)state;
	echo_from_threads("tcp://127.0.0.1:0");
}

static void test_sp_req_ipc_threads(void **state)
{
	char url[128];

	(void)state;
	snprintf(url, sizeof(url), "ipc:///tmp/lunar-test-sp-req-%d", (int)getpid());
	echo_from_threads(url);
	unlink(url + 6);
}

/* Without busy-polling, the same answers. */
static void test_sp_req_no_busy_poll(void **state)
{
	char got[MAX_REPLY + 1];
	struct lp_spreq *r;
	struct echo e;

	(void)state;
	lp_spreq_busy_poll_set(0); /* back to 50 by the teardown */
	e.delay_us = 0;
	echo_start(&e, "tcp://127.0.0.1:0");
	assert_int_equal(lp_spreq_alloc(e.url, MAX_REPLY, &r), 0);
	assert_int_equal(call(r, "asleep", got, 5000), 0);
	assert_string_equal(got, "asleep");
	lp_spreq_free(r);
	echo_stop(&e);
}

static int busy_poll_back(void **state)
{
	(void)state;
	lp_spreq_busy_poll_set(50);
	return 0;
}

static void count_drop(void *arg)
{
	(*(int *)arg)++;
}

/* The server restarts on the same address: the pooled connection it shut
 * is dropped (and said), and the call goes on a new one. */
static void test_sp_req_server_restart(void **state)
{
	char got[MAX_REPLY + 1], url[128];
	struct lp_spreq *r;
	struct echo e;
	int drops = 0;

	(void)state;
	snprintf(url, sizeof(url), "ipc:///tmp/lunar-test-sp-restart-%d", (int)getpid());
	e.delay_us = 0;
	echo_start(&e, url);
	assert_int_equal(lp_spreq_alloc(url, MAX_REPLY, &r), 0);
	lp_spreq_on_drop(r, count_drop, &drops);
	assert_int_equal(call(r, "before", got, 5000), 0);
	echo_stop(&e);
	usleep(100 * 1000); /* nng may shut its end of ours on a thread of its own */
	echo_start(&e, url);
	assert_int_equal(call(r, "after", got, 5000), 0);
	assert_string_equal(got, "after");
	assert_int_equal(drops, 1);
	lp_spreq_free(r);
	echo_stop(&e);
	unlink(url + 6);
}

static int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* A burst of callers opens a connection each; a second later the next
 * call closes all but the newest. */
static void test_sp_req_burst_connections_age_out(void **state)
{
	struct caller k[CALLERS];
	char got[MAX_REPLY + 1];
	struct lp_spreq *r;
	struct echo e;
	int before;

	(void)state;
	e.delay_us = 2000; /* each caller waits while the others send */
	echo_start(&e, "tcp://127.0.0.1:0");
	assert_int_equal(lp_spreq_alloc(e.url, MAX_REPLY, &r), 0);
	assert_int_equal(call(r, "first", got, 5000), 0);
	before = open_fds();
	for (int i = 0; i < CALLERS; i++) {
		k[i] = (struct caller){.r = r, .id = i};
		assert_int_equal(pthread_create(&k[i].t, NULL, caller_main, &k[i]), 0);
	}
	for (int i = 0; i < CALLERS; i++)
		pthread_join(k[i].t, NULL);
	assert_true(open_fds() > before); /* the callers overlapped */
	usleep(1100 * 1000);
	assert_int_equal(call(r, "later", got, 5000), 0);
	/* (the server's ends, in this process too, close once nng sees ours) */
	for (int i = 0; i < 200 && open_fds() != before; i++)
		usleep(10 * 1000);
	assert_int_equal(open_fds(), before);
	lp_spreq_free(r);
	echo_stop(&e);
}

/* --- a raw TCP server that lies, one way per connection --- */

enum lie { LIE_NONE, LIE_ID, LIE_LONG, LIE_SHORT, LIE_CUT, LIE_NOT_REP };

struct liar {
	int lfd;
	uint16_t port;
	enum lie how;
	pthread_t t;
};

static int read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = recv(fd, (char *)buf + got, n - got, 0);

		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

/* One connection: the header exchange, then one request, lied to. */
static void *liar_main(void *arg)
{
	struct liar *l = arg;
	uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x31, 0, 0}, in[8 + 4 + 64], out[8 + 4 + 4];
	uint64_t len, out_len = htobe64(8);
	int fd = accept(l->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	if (l->how == LIE_NOT_REP)
		hello[5] = 0x30; /* another REQ */
	if (send(fd, hello, 8, MSG_NOSIGNAL) != 8 || read_full(fd, in, 8) || read_full(fd, in, 8))
		goto out;
	len = be64toh(*(uint64_t *)in);
	if (len > sizeof(in) - 8 || read_full(fd, in + 8, len))
		goto out;
	memcpy(out + 8, in + 8, 4); /* the id */
	memcpy(out + 12, "fine", 4);
	if (l->how == LIE_ID)
		out[8] ^= 1;
	if (l->how == LIE_LONG)
		out_len = htobe64((uint64_t)MAX_REPLY + 5);
	if (l->how == LIE_SHORT)
		out_len = htobe64(3); /* not even an id */
	if (l->how == LIE_CUT)
		out_len = htobe64(100);
	memcpy(out, &out_len, 8);
	send(fd, out, sizeof(out), MSG_NOSIGNAL);
out:
	close(fd);
	return NULL;
}

static void liar_start(struct liar *l, enum lie how)
{
	l->how = how;
	l->lfd = test_listen_loopback(4, &l->port);
	assert_int_equal(pthread_create(&l->t, NULL, liar_main, l), 0);
}

static void liar_stop(struct liar *l)
{
	shutdown(l->lfd, SHUT_RDWR);
	pthread_join(l->t, NULL);
	close(l->lfd);
}

/* The call's result against a server lying how. */
static int call_liar(enum lie how, uint64_t timeout_ms, char *got)
{
	struct lp_spreq *r;
	struct liar l;
	char url[64];
	int rc;

	liar_start(&l, how);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", (unsigned)l.port);
	assert_int_equal(lp_spreq_alloc(url, MAX_REPLY, &r), 0);
	rc = call(r, "question", got, timeout_ms);
	lp_spreq_free(r);
	liar_stop(&l);
	return rc;
}

static void test_sp_req_lies_fail_the_call(void **state)
{
	char got[MAX_REPLY + 1];
	uint64_t t0;

	(void)state;
	assert_int_equal(call_liar(LIE_NONE, 5000, got), 0); /* the liar's honest form */
	assert_string_equal(got, "fine");
	assert_int_equal(call_liar(LIE_ID, 5000, got), -ECONNRESET);
	assert_int_equal(call_liar(LIE_LONG, 5000, got), -ECONNRESET);
	assert_int_equal(call_liar(LIE_SHORT, 5000, got), -ECONNRESET);
	assert_int_equal(call_liar(LIE_CUT, 5000, got), -ECONNRESET);
	/* not a REP socket: refused, dialled again until the deadline */
	t0 = lc_now_ms();
	assert_int_equal(call_liar(LIE_NOT_REP, 300, got), -ETIMEDOUT);
	assert_true(lc_now_ms() - t0 >= 290);
}

static void test_sp_req_bad_urls(void **state)
{
	const char *bad[] = {"tcp://",	      "tcp://h",   "tcp://h:",	 "tcp://h:0",
			     "tcp://h:65536", "tcp://:80", "tcp://h:8x", "ipc://",
			     "http://h:1",    "h:1",	   NULL};
	struct lp_spreq *r;

	(void)state;
	for (int i = 0; bad[i]; i++)
		assert_int_equal(lp_spreq_alloc(bad[i], MAX_REPLY, &r), -EINVAL);
	assert_int_equal(lp_spreq_alloc("tcp://[::1]:5", MAX_REPLY, &r), 0);
	lp_spreq_free(r);
}

/* Closed: calls fail at once. */
static void test_sp_req_closed(void **state)
{
	char got[MAX_REPLY + 1];
	struct lp_spreq *r;

	(void)state;
	assert_int_equal(lp_spreq_alloc("tcp://127.0.0.1:1", MAX_REPLY, &r), 0);
	lp_spreq_close(r);
	assert_int_equal(call(r, "late", got, 5000), -ECANCELED);
	lp_spreq_free(r);
}

int main(void)
{
	nng_socket s;
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sp_req_tcp_threads),
	    cmocka_unit_test(test_sp_req_ipc_threads),
	    cmocka_unit_test_teardown(test_sp_req_no_busy_poll, busy_poll_back),
	    cmocka_unit_test(test_sp_req_server_restart),
	    cmocka_unit_test(test_sp_req_burst_connections_age_out),
	    cmocka_unit_test(test_sp_req_lies_fail_the_call),
	    cmocka_unit_test(test_sp_req_bad_urls),
	    cmocka_unit_test(test_sp_req_closed),
	};

	/* nng 1.5 sets itself up at its first socket, racily: once here. */
	if (nng_rep0_open(&s) || nng_close(s))
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
