/*
 * sp_rep.h - lp_sprep, the replying side of the SP request/reply protocol
 * on nng's sp-tcp wire (sp_wire.h), what an nng REP socket serves, without
 * nng's threads: a fixed set of workers wait on one epoll set of
 * connections, and the worker a connection's bytes wake reads the request,
 * runs the handler and writes the reply itself. One wakeup a call, where
 * nng hands each message from its poller thread to a task thread and back
 * (a master served by nng spent 70 % of its CPU switching between them,
 * docs/architecture.md).
 *
 * Every connection is a small state machine (its opening header, a
 * message's length, its bytes, a reply being sent), so a peer that sends
 * half a request, or reads its reply slowly, holds no worker: it is looked
 * at again only when its socket is ready. Bytes from a peer are untrusted:
 * a wrong header, a length over the limit, a backtrace without its last
 * word close that connection and no other. REQ requesters that keep
 * several requests in flight on one connection are answered in order.
 * At the cap a new connection shuts the one answered least recently (an
 * idle one, or a peer that never finished a request), so a flood of
 * silent connections cannot shut out the others; TCP keepalive finds a
 * peer gone without a word within about 90 s.
 */
#ifndef LUNAR_PROTO_SP_REP_H
#define LUNAR_PROTO_SP_REP_H

#include <stddef.h>
#include <stdint.h>

/* A message: the request, then the reply the handler makes in its place. */
struct lp_spmsg {
	uint8_t *body;
	size_t len;
	size_t cap; /* bytes at body */
};

/* lp_spmsg_reply - make m a reply of len bytes at m->body, to be filled by
 * the caller: the request's bytes are no longer valid after. 0 or -ENOMEM
 * (m unchanged). */
int lp_spmsg_reply(struct lp_spmsg *m, size_t len);

/*
 * A handler turns the request in m (m->len bytes, its backtrace already
 * taken off) into its reply, with lp_spmsg_reply, and returns 0; or
 * returns a negative code and the connection is closed unanswered (a
 * peer that failed a check, or no memory to answer with). It runs on a
 * worker, several at once on other connections.
 */
typedef int (*lp_sprep_fn)(void *arg, struct lp_spmsg *m);

struct lp_sprep_cfg {
	unsigned workers;   /* threads serving connections, >= 1 */
	unsigned max_conns; /* connections open at once (see above) */
	size_t max_request; /* longest request body accepted */
	lp_sprep_fn fn;
	void *arg;
};

struct lp_sprep;

/*
 * lp_sprep_start - listen on url ("tcp://HOST:PORT", HOST a name or an
 * address, [v6] bracketed; PORT 0 picks a free one) and serve it. 0 and
 * *out; -EINVAL (another form, or a cfg out of range), -EADDRINUSE,
 * -ENOMEM, or another bind/listen -errno. Start-up thread.
 */
int lp_sprep_start(const char *url, const struct lp_sprep_cfg *cfg, struct lp_sprep **out);

/* lp_sprep_port - the bound TCP port. Any thread. */
uint16_t lp_sprep_port(const struct lp_sprep *s);

/* lp_sprep_connections - connections open now. Any thread. */
unsigned lp_sprep_connections(const struct lp_sprep *s);

/* lp_sprep_stop - stop listening, let each handler running finish, close
 * every connection (no reply is sent after), free. NULL: no-op. Not from
 * a handler, nor concurrently with itself. */
void lp_sprep_stop(struct lp_sprep *s);

#endif /* LUNAR_PROTO_SP_REP_H */
