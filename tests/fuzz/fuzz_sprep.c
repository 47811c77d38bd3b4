/*
 * fuzz_sprep.c - libFuzzer target for the master's RPC framing: the
 * replying side of nng's sp-tcp wire (proto/sp_rep.c, included for its
 * static serve()). Each input is what a peer sends on one connection: it is
 * written into a socket pair whose sending side is then shut down, and
 * serve() runs on the other end as a worker would, re-armed in a real epoll
 * set, until it drops the connection. What comes back must be, byte for
 * byte, the replies of a plain reading of the input (expect() below): the
 * opening header, then each request's length, backtrace (words up to the
 * one with its top bit, at most BT_MAX bytes) and body, answered by the
 * handler, up to the first frame the server must refuse. Requests are
 * capped small (FZ_MAX_REQUEST) so every limit is within a mutation's
 * reach; the handler answers with more bytes than it was sent (the
 * message's buffer grows) and refuses a body that starts with 0xFF.
 */
#include "../../proto/sp_rep.c"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include "fuzz_check.h"

#define FZ_MAX_REQUEST 256
#define FZ_INPUT_MAX   8192
/* A reply is at most its length, the backtrace, and the body plus one. */
#define FZ_REPLY_MAX (8 + BT_MAX + FZ_MAX_REQUEST + 1)
/* Every request takes 12 input bytes at least. */
#define FZ_OUT_MAX (FZ_INPUT_MAX / 12 * FZ_REPLY_MAX)

static struct lp_sprep server;
static uint8_t got[FZ_OUT_MAX], want[FZ_OUT_MAX];

/* The handler's answer to body[0..n): n's low byte, then body reversed. */
static void answer_of(const uint8_t *body, size_t n, uint8_t *out)
{
	out[0] = (uint8_t)n;
	for (size_t i = 0; i < n; i++)
		out[1 + i] = body[n - 1 - i];
}

static int handler(void *arg, struct lp_spmsg *m)
{
	uint8_t req[FZ_MAX_REQUEST];
	size_t n = m->len;

	(void)arg;
	FZ_CHECK(n <= FZ_MAX_REQUEST);
	if (n && m->body[0] == 0xFF)
		return -EPROTO;
	memcpy(req, m->body, n);
	if (lp_spmsg_reply(m, n + 1))
		return -ENOMEM;
	answer_of(req, n, m->body);
	return 0;
}

/*
 * The replies to the n bytes at d, into out: their length; *end is what
 * serve() ends with: -ECONNRESET at the end of the stream (after whole
 * requests, or within one), -EPROTO at a frame it must refuse.
 */
static size_t expect(const uint8_t *d, size_t n, uint8_t *out, int *end)
{
	size_t at = SP_HELLO, o = 0;

	*end = -ECONNRESET;
	if (n < SP_HELLO)
		return 0;
	*end = -EPROTO;
	if (!sp_hello_is(d, SP_REQ0))
		return 0;
	for (;;) {
		uint64_t len = 0, be;
		size_t bt = 0;

		*end = -ECONNRESET;
		if (n - at < 8)
			return o;
		for (int i = 0; i < 8; i++)
			len = len << 8 | d[at + i];
		at += 8;
		*end = -EPROTO;
		if (len < 4 || len > FZ_MAX_REQUEST + BT_MAX)
			return o;
		*end = -ECONNRESET;
		if (n - at < len)
			return o;
		*end = -EPROTO;
		do {
			if (bt + 4 > len || bt == BT_MAX)
				return o;
			bt += 4;
		} while (!(d[at + bt - 4] & 0x80));
		if (len - bt > FZ_MAX_REQUEST || (len > bt && d[at + bt] == 0xFF))
			return o;
		be = htobe64(bt + (len - bt) + 1);
		memcpy(out + o, &be, 8);
		memcpy(out + o + 8, d + at, bt);
		answer_of(d + at + bt, len - bt, out + o + 8 + bt);
		o += 8 + bt + (len - bt) + 1;
		at += len;
	}
}

/* Take what the server sent so far. */
static void drain(int fd, size_t *ngot)
{
	ssize_t k;

	while ((k = recv(fd, got + *ngot, sizeof(got) - *ngot, MSG_DONTWAIT)) > 0)
		*ngot += (size_t)k;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	server.cfg = (struct lp_sprep_cfg){
	    .workers = 1, .max_conns = 1, .max_request = FZ_MAX_REQUEST, .fn = handler};
	server.efd = epoll_create1(EPOLL_CLOEXEC);
	FZ_CHECK(server.efd >= 0);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT};
	size_t ngot = 0, nwant;
	struct conn *c;
	int sv[2], rc, end, rounds = 0;

	if (size > FZ_INPUT_MAX)
		return 0;
	FZ_CHECK(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	FZ_CHECK(!size || send(sv[0], data, size, MSG_NOSIGNAL) == (ssize_t)size);
	shutdown(sv[0], SHUT_WR);
	FZ_CHECK((c = calloc(1, sizeof(*c))) != NULL);
	c->fd = sv[1];
	c->st = C_HELLO;
	pthread_mutex_init(&c->own, NULL);
	FZ_CHECK(fcntl(c->fd, F_SETFL, O_NONBLOCK) == 0);
	ev.data.ptr = c;
	FZ_CHECK(!epoll_ctl(server.efd, EPOLL_CTL_ADD, c->fd, &ev));
	/* As a worker: serve until it gives the connection up; its replies
	 * are taken as they come, so a full socket only waits a round. */
	do {
		rc = serve(&server, c);
		drain(sv[0], &ngot);
		FZ_CHECK(++rounds < 100000);
	} while (!rc);
	conn_free(c); /* closes sv[1], and so takes it out of the epoll set */
	drain(sv[0], &ngot);
	close(sv[0]);
	nwant = expect(data, size, want, &end);
	FZ_CHECK(ngot == nwant && !memcmp(got, want, nwant));
	FZ_CHECK(rc == end);
	return 0;
}
