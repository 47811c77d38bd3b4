/*
 * test_sp_rep.c - the SP replier (proto/sp_rep.c): real nng REQ sockets
 * (several requests in flight on one connection) and lp_spreq requesters
 * from several threads at once, each answered with its own reply; a
 * request larger than the first buffer, arriving in pieces; a peer that
 * stops half-way through a request, or never reads its large reply,
 * holds no worker from the others (one worker); every malformed opening
 * or message closes that connection alone; a handler's refusal closes its
 * connection unanswered; at the cap a new connection shuts the silent one,
 * not the one answered since; requests sent together and cut anywhere,
 * with backtraces of 1 to 8 words, answered in order; a stop waits for
 * the handler running, and wakes eight idle workers; bad URLs and a taken
 * port.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "sp_rep.h"
#include "sp_req.h"
#include "sp_wire.h"
#include "tests/cmocka_main.h"

#define MAX_REQ	  (4u << 20)
#define CALLERS	  4
#define CALLS	  200
#define BIG_REPLY (32u << 20) /* more than a socket's buffers hold */

/* --- the server under test: replies "re:" + the request --- */

struct srv {
	struct lp_sprep *s;
	char url[64];
	atomic_int in_handler, handled;
	unsigned sleep_ms; /* in each handler call */
};

static int handler(void *arg, struct lp_spmsg *m)
{
	struct srv *v = arg;
	size_t n = m->len;
	uint8_t *copy;
	int rc = 0;

	atomic_fetch_add(&v->in_handler, 1);
	if (v->sleep_ms)
		usleep(v->sleep_ms * 1000u);
	if (n == 6 && !memcmp(m->body, "refuse", 6)) {
		rc = -EPERM;
	} else if (n == 3 && !memcmp(m->body, "big", 3)) {
		if (!(rc = lp_spmsg_reply(m, BIG_REPLY)))
			memset(m->body, 'b', BIG_REPLY);
	} else if (!(copy = malloc(n ? n : 1))) {
		rc = -ENOMEM;
	} else {
		memcpy(copy, m->body, n);
		if (!(rc = lp_spmsg_reply(m, n + 3))) {
			memcpy(m->body, "re:", 3);
			memcpy(m->body + 3, copy, n);
		}
		free(copy);
	}
	atomic_fetch_sub(&v->in_handler, 1);
	atomic_fetch_add(&v->handled, 1);
	return rc;
}

static void srv_start(struct srv *v, unsigned workers, unsigned max_conns)
{
	struct lp_sprep_cfg cfg = {.workers = workers,
				   .max_conns = max_conns,
				   .max_request = MAX_REQ,
				   .fn = handler,
				   .arg = v};

	atomic_init(&v->in_handler, 0);
	atomic_init(&v->handled, 0);
	assert_int_equal(lp_sprep_start("tcp://127.0.0.1:0", &cfg, &v->s), 0);
	snprintf(v->url, sizeof(v->url), "tcp://127.0.0.1:%u", (unsigned)lp_sprep_port(v->s));
}

/* Wait (5 s at most) for the server to hold n connections. */
static void wait_conns(struct srv *v, unsigned n)
{
	for (int i = 0; i < 500 && lp_sprep_connections(v->s) != n; i++)
		usleep(10 * 1000);
	assert_int_equal(lp_sprep_connections(v->s), n);
}

/* One call through an lp_spreq: 0 and the reply in out (NUL-ended). */
static int call(struct lp_spreq *r, const void *msg, size_t len, char *out, size_t outmax,
		uint64_t timeout_ms)
{
	void *rep = NULL;
	size_t n;
	int rc = lp_spreq_call(r, msg, len, &rep, &n, lc_now_ms() + timeout_ms);

	if (!rc) {
		assert_true(n < outmax);
		memcpy(out, rep, n);
		out[n] = '\0';
		free(rep);
	}
	return rc;
}

/* --- raw peers --- */

static int raw_connect(const struct srv *v)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(lp_sprep_port(v->s)),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void read_full(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t k = recv(fd, (char *)buf + got, n - got, 0);

		assert_true(k > 0);
		got += (size_t)k;
	}
}

/* The bytes a raw peer sends, then whether the server closed it (the end
 * of the stream within 5 s, after at most its opening header). */
static int closed_after(const struct srv *v, const void *bytes, size_t n)
{
	uint8_t in[64];
	struct pollfd p;
	ssize_t k;
	int fd = raw_connect(v), got = 0;

	assert_int_equal(send(fd, bytes, n, MSG_NOSIGNAL), (ssize_t)n);
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	while (poll(&p, 1, 5000) == 1 && (k = recv(fd, in, sizeof(in), 0)) > 0)
		got += (int)k;
	close(fd);
	return got <= 8 && p.revents;
}

/* An opening header of protocol proto, then a message of length len
 * (big-endian, as sent) and body. */
static size_t frame(uint8_t *out, unsigned proto, uint64_t len, const void *body, size_t blen)
{
	const uint8_t hello[8] = {0, 'S', 'P', 0, 0, (uint8_t)proto, 0, 0};
	uint64_t be = htobe64(len);

	memcpy(out, hello, 8);
	memcpy(out + 8, &be, 8);
	memcpy(out + 16, body, blen);
	return 16 + blen;
}

/* --- tests --- */

struct caller {
	pthread_t t;
	const char *url;
	struct lp_spreq *r; /* or an nng REQ socket of its own */
	nng_socket req;
	int id, bad;
};

static void *spreq_main(void *arg)
{
	struct caller *k = arg;
	char msg[64], want[80], got[128];

	for (int i = 0; i < CALLS; i++) {
		snprintf(msg, sizeof(msg), "spreq %d call %d", k->id, i);
		snprintf(want, sizeof(want), "re:%s", msg);
		if (call(k->r, msg, strlen(msg), got, sizeof(got), 5000) || strcmp(got, want))
			k->bad++;
	}
	return NULL;
}

/* One request on ctx (nng 1.5 has only the aio form): the reply, or NULL. */
static nng_msg *ctx_call(nng_ctx ctx, nng_aio *aio, const char *msg)
{
	nng_msg *m;

	if (nng_msg_alloc(&m, 0) || nng_msg_append(m, msg, strlen(msg)))
		return NULL;
	nng_aio_set_msg(aio, m);
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	if (nng_aio_result(aio)) {
		nng_msg_free(m);
		return NULL;
	}
	nng_ctx_recv(ctx, aio);
	nng_aio_wait(aio);
	return nng_aio_result(aio) ? NULL : nng_aio_get_msg(aio);
}

/* nng REQ contexts on one socket: requests in flight together on one
 * connection, answered in order. */
static void *nng_main(void *arg)
{
	struct caller *k = arg;
	char msg[64], want[80];
	nng_aio *aio;
	nng_ctx ctx;

	if (nng_aio_alloc(&aio, NULL, NULL) || nng_ctx_open(&ctx, k->req)) {
		k->bad = CALLS;
		return NULL;
	}
	nng_aio_set_timeout(aio, 5000);
	for (int i = 0; i < CALLS; i++) {
		nng_msg *r;

		snprintf(msg, sizeof(msg), "nng %d call %d", k->id, i);
		snprintf(want, sizeof(want), "re:%s", msg);
		if (!(r = ctx_call(ctx, aio, msg))) {
			k->bad++;
			continue;
		}
		k->bad +=
		    nng_msg_len(r) != strlen(want) || memcmp(nng_msg_body(r), want, strlen(want));
		nng_msg_free(r);
	}
	nng_ctx_close(ctx);
	nng_aio_free(aio);
	return NULL;
}

static void test_sp_rep_answers_nng_and_spreq_threads(void **state)
{
	struct caller k[2 * CALLERS];
	struct lp_spreq *r;
	nng_socket req;
	struct srv v = {0};

	(void)state;
	srv_start(&v, 2, 64);
	assert_int_equal(lp_spreq_alloc(v.url, 4096, &r), 0);
	assert_int_equal(nng_req0_open(&req), 0);
	assert_int_equal(nng_dial(req, v.url, NULL, 0), 0);
	for (int i = 0; i < 2 * CALLERS; i++) {
		k[i] = (struct caller){.r = r, .req = req, .id = i};
		assert_int_equal(
		    pthread_create(&k[i].t, NULL, i < CALLERS ? spreq_main : nng_main, &k[i]), 0);
	}
	for (int i = 0; i < 2 * CALLERS; i++) {
		pthread_join(k[i].t, NULL);
		assert_int_equal(k[i].bad, 0);
	}
	assert_int_equal(atomic_load(&v.handled), 2 * CALLERS * CALLS);
	nng_close(req);
	lp_spreq_free(r);
	wait_conns(&v, 0);
	lp_sprep_stop(v.s);
}

/* A 3 MiB request (past the first 64 KiB buffer, in many pieces) and one
 * just under the limit come back whole; one over it closes the call. */
static void test_sp_rep_large_requests(void **state)
{
	size_t n = 3u << 20;
	uint8_t *msg = malloc(MAX_REQ + 1);
	struct lp_spreq *r;
	void *rep = NULL;
	struct srv v = {0};
	size_t len;

	(void)state;
	assert_non_null(msg);
	for (size_t i = 0; i < MAX_REQ + 1; i++)
		msg[i] = (uint8_t)(i * 7 + 1);
	srv_start(&v, 1, 8);
	assert_int_equal(lp_spreq_alloc(v.url, MAX_REQ + 8, &r), 0);
	for (int round = 0; round < 2; round++, n = MAX_REQ) {
		assert_int_equal(lp_spreq_call(r, msg, n, &rep, &len, lc_now_ms() + 10000), 0);
		assert_int_equal(len, n + 3);
		assert_memory_equal(rep, "re:", 3);
		assert_memory_equal((uint8_t *)rep + 3, msg, n);
		free(rep);
	}
	assert_int_equal(lp_spreq_call(r, msg, MAX_REQ + 1, &rep, &len, lc_now_ms() + 10000),
			 -ECONNRESET);
	lp_spreq_free(r);
	free(msg);
	lp_sprep_stop(v.s);
}

/* With one worker, a peer stopped half-way through a request and one that
 * never reads its 32 MiB reply hold it from no one. */
static void test_sp_rep_slow_peers_hold_no_worker(void **state)
{
	uint8_t half[16 + 4];
	char got[128];
	struct lp_spreq *r;
	struct srv v = {0};
	int stalled, deaf;
	uint32_t id = htobe32(0x80000001u);

	(void)state;
	srv_start(&v, 1, 8);
	/* a request of 100 bytes of which 4 come */
	stalled = raw_connect(&v);
	assert_int_equal(send(stalled, half, frame(half, 0x30, 100, &id, 4), MSG_NOSIGNAL), 20);
	/* "big", then never a read */
	{
		uint8_t req[16 + 7];

		frame(req, 0x30, 7, &id, 4);
		memcpy(req + 20, "big", 3);
		deaf = raw_connect(&v);
		assert_int_equal(send(deaf, req, sizeof(req), MSG_NOSIGNAL), (ssize_t)sizeof(req));
	}
	for (int i = 0; i < 500 && atomic_load(&v.handled) < 1; i++)
		usleep(10 * 1000);
	assert_int_equal(atomic_load(&v.handled), 1);
	assert_int_equal(lp_spreq_alloc(v.url, 4096, &r), 0);
	assert_int_equal(call(r, "still here", 10, got, sizeof(got), 5000), 0);
	assert_string_equal(got, "re:still here");
	lp_spreq_free(r);
	close(stalled);
	close(deaf);
	wait_conns(&v, 0);
	lp_sprep_stop(v.s);
}

/* Each malformed opening or message closes its connection, and the
 * server goes on answering. */
static void test_sp_rep_malformed_closes_that_connection(void **state)
{
	uint32_t id = htobe32(0x80000001u), hop = htobe32(1), hops[SP_HOPS_MAX + 1];
	uint8_t buf[16 + sizeof(hops)];
	struct lp_spreq *r;
	struct srv v = {0};
	char got[128];

	(void)state;
	for (int i = 0; i < SP_HOPS_MAX + 1; i++)
		hops[i] = hop;
	srv_start(&v, 1, 8);
	/* a REP's opening, not a REQ's */
	assert_true(closed_after(&v, buf, frame(buf, 0x31, 4, &id, 4)));
	/* a length under an id's, over the limit, and a lie about the stream */
	assert_true(closed_after(&v, buf, frame(buf, 0x30, 3, &id, 3)));
	assert_true(closed_after(&v, buf, frame(buf, 0x30, (uint64_t)MAX_REQ + 1000, &id, 4)));
	assert_true(closed_after(&v, buf, frame(buf, 0x30, UINT64_MAX, &id, 4)));
	/* a backtrace without its last word: too long, or cut by the end */
	assert_true(closed_after(&v, buf, frame(buf, 0x30, sizeof(hops), hops, sizeof(hops))));
	assert_true(closed_after(&v, buf, frame(buf, 0x30, 4, &hop, 4)));
	/* a handler's refusal */
	{
		uint8_t ref[16 + 10];

		frame(ref, 0x30, 10, &id, 4);
		memcpy(ref + 20, "refuse", 6);
		assert_true(closed_after(&v, ref, sizeof(ref)));
	}
	/* the honest frame is answered, not closed */
	{
		uint8_t ok[16 + 6], in[8 + 8 + 4 + 5];
		uint64_t len = htobe64(4 + 5);
		int fd = raw_connect(&v);

		frame(ok, 0x30, 6, &id, 4);
		memcpy(ok + 20, "hi", 2);
		assert_int_equal(send(fd, ok, sizeof(ok), MSG_NOSIGNAL), (ssize_t)sizeof(ok));
		read_full(fd, in, sizeof(in));
		assert_memory_equal(in, "\0SP\0\0\x31\0\0", 8);
		assert_memory_equal(in + 8, &len, 8);
		assert_memory_equal(in + 16, &id, 4);
		assert_memory_equal(in + 20, "re:hi", 5);
		close(fd);
	}
	assert_int_equal(lp_spreq_alloc(v.url, 4096, &r), 0);
	assert_int_equal(call(r, "after all that", 14, got, sizeof(got), 5000), 0);
	assert_string_equal(got, "re:after all that");
	assert_int_equal(call(r, "refuse", 6, got, sizeof(got), 5000), -ECONNRESET);
	lp_spreq_free(r);
	wait_conns(&v, 0);
	lp_sprep_stop(v.s);
}

/* Two connections open of two served: a third shuts the one answered
 * least recently (a silent peer), not the one that was answered since. */
static void test_sp_rep_cap_shuts_least_recent(void **state)
{
	uint32_t id = htobe32(0x80000001u);
	uint8_t req[16 + 6], in[8 + 8 + 4 + 5];
	struct lp_spreq *r;
	struct srv v = {0};
	struct pollfd p;
	char got[128];
	int silent, busy;

	(void)state;
	srv_start(&v, 1, 2);
	silent = raw_connect(&v);
	wait_conns(&v, 1);
	usleep(5000);
	busy = raw_connect(&v);
	frame(req, 0x30, 6, &id, 4);
	memcpy(req + 20, "hi", 2);
	assert_int_equal(send(busy, req, sizeof(req), MSG_NOSIGNAL), (ssize_t)sizeof(req));
	read_full(busy, in, sizeof(in));
	assert_memory_equal(in + 20, "re:hi", 5);
	usleep(5000);
	assert_int_equal(lp_spreq_alloc(v.url, 4096, &r), 0);
	assert_int_equal(call(r, "room now", 8, got, sizeof(got), 5000), 0);
	assert_string_equal(got, "re:room now");
	/* the silent one was shut: its opening header, then the end */
	read_full(silent, in, 8);
	p = (struct pollfd){.fd = silent, .events = POLLIN};
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(recv(silent, in, sizeof(in), 0), 0);
	/* the answered one is still served (its request without the hello) */
	assert_int_equal(send(busy, req + 8, sizeof(req) - 8, MSG_NOSIGNAL),
			 (ssize_t)(sizeof(req) - 8));
	read_full(busy, in, 8 + 4 + 5);
	assert_memory_equal(in + 12, "re:hi", 5);
	lp_spreq_free(r);
	close(silent);
	close(busy);
	wait_conns(&v, 0);
	lp_sprep_stop(v.s);
}

/* Three requests in one write, the third cut inside its length and sent
 * later, with backtraces of 1, 3 and 8 words: three replies, in order,
 * each after its own backtrace. */
static void test_sp_rep_pipelined_bytes(void **state)
{
	uint32_t bt[3][SP_HOPS_MAX];
	const unsigned hops[3] = {1, 3, SP_HOPS_MAX};
	uint8_t out[3 * (8 + 4 * SP_HOPS_MAX + 2)], in[8 + 4 * SP_HOPS_MAX + 5];
	struct srv v = {0};
	size_t n = 0, cut = 0;
	int fd;

	(void)state;
	srv_start(&v, 2, 8);
	for (int k = 0; k < 3; k++) {
		uint64_t len = htobe64(4 * hops[k] + 2);

		for (unsigned w = 0; w < hops[k]; w++)
			bt[k][w] = htobe32(w + 1 == hops[k] ? 0x80000000u | (unsigned)k : w + 7);
		if (k == 2)
			cut = n + 3; /* inside the third length */
		memcpy(out + n, &len, 8);
		memcpy(out + n + 8, bt[k], 4 * hops[k]);
		memcpy(out + n + 8 + 4 * hops[k], k == 0 ? "k0" : k == 1 ? "k1" : "k2", 2);
		n += 8 + 4 * hops[k] + 2;
	}
	fd = raw_connect(&v);
	assert_int_equal(send(fd, "\0SP\0\0\x30\0\0", 8, MSG_NOSIGNAL), 8);
	assert_int_equal(send(fd, out, cut, MSG_NOSIGNAL), (ssize_t)cut);
	read_full(fd, in, 8); /* the server's opening header */
	for (int k = 0; k < 3; k++) {
		size_t rlen = 8 + 4 * hops[k] + 5;
		uint64_t want = htobe64(4 * hops[k] + 5);
		char body[16];

		if (k == 2) {
			usleep(20000);
			assert_int_equal(send(fd, out + cut, n - cut, MSG_NOSIGNAL),
					 (ssize_t)(n - cut));
		}
		read_full(fd, in, rlen);
		assert_memory_equal(in, &want, 8);
		assert_memory_equal(in + 8, bt[k], 4 * hops[k]);
		snprintf(body, sizeof(body), "re:k%d", k);
		assert_memory_equal(in + 8 + 4 * hops[k], body, 5);
	}
	close(fd);
	wait_conns(&v, 0);
	lp_sprep_stop(v.s);
}

/* A stop with eight workers idle returns: each wakes the next. */
static void test_sp_rep_stop_wakes_every_worker(void **state)
{
	struct lp_spreq *r;
	struct srv v = {0};
	char got[128];

	(void)state;
	srv_start(&v, 8, 8);
	assert_int_equal(lp_spreq_alloc(v.url, 4096, &r), 0);
	assert_int_equal(call(r, "one", 3, got, sizeof(got), 5000), 0);
	lp_spreq_free(r);
	lp_sprep_stop(v.s);
}

struct stopper {
	pthread_t t;
	struct srv *v;
	uint64_t stopped_ms;
};

static void *stop_main(void *arg)
{
	struct stopper *st = arg;

	lp_sprep_stop(st->v->s);
	st->stopped_ms = lc_now_ms();
	return NULL;
}

/* A stop waits for the handler running (300 ms) and closes every
 * connection; the requester's call ends either way. */
static void test_sp_rep_stop_waits_for_handler(void **state)
{
	struct stopper st = {.v = NULL};
	struct lp_spreq_xchg x;
	struct lp_spreq *r;
	struct srv v = {0};
	void *rep = NULL;
	uint64_t t0;
	size_t len;
	int rc;

	(void)state;
	srv_start(&v, 2, 8);
	v.sleep_ms = 300;
	st.v = &v;
	assert_int_equal(lp_spreq_alloc(v.url, 4096, &r), 0);
	/* the call is sent from here; the stop starts once its handler runs */
	t0 = lc_now_ms();
	assert_int_equal(lp_spreq_begin(r, t0 + 5000, &x), 0);
	assert_int_equal(lp_spreq_send(r, &x, "slow", 4), 0);
	for (int i = 0; i < 500 && !atomic_load(&v.in_handler); i++)
		usleep(1000);
	assert_int_equal(atomic_load(&v.in_handler), 1);
	assert_int_equal(pthread_create(&st.t, NULL, stop_main, &st), 0);
	rc = lp_spreq_end(r, &x, 0, &rep, &len);
	free(rep);
	pthread_join(st.t, NULL);
	assert_true(rc == 0 || rc == -ECONNRESET);
	assert_int_equal(atomic_load(&v.in_handler), 0);
	assert_int_equal(atomic_load(&v.handled), 1);
	assert_true(st.stopped_ms - t0 >= 290);
	lp_spreq_free(r);
}

static void test_sp_rep_bad_urls_and_taken_port(void **state)
{
	const char *bad[] = {"ipc:///tmp/x", "tcp://",	   "tcp://h", "tcp://127.0.0.1:65536",
			     "tcp://:80",    "http://h:1", NULL};
	struct lp_sprep_cfg cfg = {.workers = 1, .max_conns = 1, .max_request = 64, .fn = handler};
	struct lp_sprep *s = NULL;
	struct srv v = {0};
	char url[64];

	(void)state;
	for (int i = 0; bad[i]; i++)
		assert_int_equal(lp_sprep_start(bad[i], &cfg, &s), -EINVAL);
	cfg.workers = 0;
	assert_int_equal(lp_sprep_start("tcp://127.0.0.1:0", &cfg, &s), -EINVAL);
	cfg.workers = 1;
	srv_start(&v, 1, 1);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", (unsigned)lp_sprep_port(v.s));
	assert_int_equal(lp_sprep_start(url, &cfg, &s), -EADDRINUSE);
	assert_null(s);
	lp_sprep_stop(v.s);
}

int main(void)
{
	nng_socket s;
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sp_rep_answers_nng_and_spreq_threads),
	    cmocka_unit_test(test_sp_rep_large_requests),
	    cmocka_unit_test(test_sp_rep_slow_peers_hold_no_worker),
	    cmocka_unit_test(test_sp_rep_malformed_closes_that_connection),
	    cmocka_unit_test(test_sp_rep_cap_shuts_least_recent),
	    cmocka_unit_test(test_sp_rep_pipelined_bytes),
	    cmocka_unit_test(test_sp_rep_stop_wakes_every_worker),
	    cmocka_unit_test(test_sp_rep_stop_waits_for_handler),
	    cmocka_unit_test(test_sp_rep_bad_urls_and_taken_port),
	};

	/* nng 1.5 sets itself up at its first socket, racily: once here. */
	if (nng_req0_open(&s) || nng_close(s))
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
