/*
 * sp_req.h - lp_spreq, the requesting side of the SP request/reply protocol on nng's
 * wire (what an nng REP socket such as the master's serves), without nng's
 * threads: the calling thread writes its request and reads the reply
 * itself, busy-polling the socket for a bounded time before it sleeps in
 * poll(). Against an nng REP echo on this kind of machine, a round trip
 * took 18 µs so, against 55-60 µs sleeping at once and 100-130 µs for
 * nng's own REQ socket (docs/architecture.md).
 *
 * The wire is nng's sp-tcp and sp-ipc mappings of the request/reply
 * protocol (sp_wire.h); a request's backtrace is its id alone.
 *
 * Connections are pooled: a call takes an idle one (or opens one), uses it
 * for one exchange, and gives it back; a call that fails in any way closes
 * its connection, so a late reply never meets the next request, and no
 * request is ever sent twice.
 */
#ifndef LUNAR_PROTO_SP_REQ_H
#define LUNAR_PROTO_SP_REQ_H

#include <stddef.h>
#include <stdint.h>

struct lp_spreq;

/*
 * lp_spreq_alloc - a requester for url ("tcp://HOST:PORT", HOST a name, an
 * IPv4 address or a bracketed IPv6 one; or "ipc://PATH"), replies up to
 * max_reply bytes. Nothing is dialled until a call (or lp_spreq_dial).
 * 0 and *out; -EINVAL for another form; -ENOMEM.
 */
int lp_spreq_alloc(const char *url, size_t max_reply, struct lp_spreq **out);

/* lp_spreq_dial - one attempt to open a pooled connection now, by
 * deadline_ms (lc_now_ms's clock): 0, -ECONNREFUSED (nobody, or no REP
 * socket, answers), or lp_spreq_call's codes. */
int lp_spreq_dial(struct lp_spreq *r, uint64_t deadline_ms);

/*
 * lp_spreq_call - send req (len bytes) and wait for its reply until
 * deadline_ms, busy-polling up to lp_spreq_busy_poll_set's time first. A call finding
 * no connection dials, again every 100 ms while refused, until the
 * deadline (the server may come up later). Any number of threads may call
 * at once. 0 with *reply (malloc'd, the caller frees) of *reply_len bytes;
 * -ETIMEDOUT (no reply by the deadline); -ECONNRESET (the connection broke
 * or the server spoke out of turn: the request may have run); -ECANCELED
 * (lp_spreq_close); -ENOMEM.
 */
int lp_spreq_call(struct lp_spreq *r, const void *req, size_t len, void **reply, size_t *reply_len,
		  uint64_t deadline_ms);

/*
 * The same call in three steps, for a caller that numbers its requests
 * once it holds a connection (so that they leave about in order):
 * lp_spreq_begin takes a connection
 * (lp_spreq_call's codes; on failure the call is over), lp_spreq_send sends on
 * it (0 or a code), and lp_spreq_end, which must follow a successful begin,
 * receives the reply unless sent (lp_spreq_send's result) is a code, gives
 * the connection back and returns lp_spreq_call's result.
 */
struct lp_spreq_conn;
struct lp_spreq_xchg {
	struct lp_spreq_conn *c;
	uint32_t id;
	uint64_t deadline_ms;
};
int lp_spreq_begin(struct lp_spreq *r, uint64_t deadline_ms, struct lp_spreq_xchg *call);
int lp_spreq_send(struct lp_spreq *r, struct lp_spreq_xchg *call, const void *req, size_t len);
int lp_spreq_end(struct lp_spreq *r, struct lp_spreq_xchg *call, int sent, void **reply,
		 size_t *reply_len);

/*
 * lp_spreq_on_drop - call fn(arg), on the calling thread, each time a
 * connection that was open is given up as broken: a call broke on it (the
 * server closed it, or spoke out of turn), or an idle one had been shut or
 * held stray bytes. fn must not block or call into r.
 * Call once, before the first call.
 */
void lp_spreq_on_drop(struct lp_spreq *r, void (*fn)(void *arg), void *arg);

/* lp_spreq_close - fail every call in flight (waiting for them to return)
 * and every one to come with -ECANCELED. Idempotent, any thread. */
void lp_spreq_close(struct lp_spreq *r);

/* lp_spreq_free - close, then free. No call may be running. NULL: no-op. */
void lp_spreq_free(struct lp_spreq *r);

/* lp_spreq_connections - connections open to servers, idle or in use, of
 * every requester in the process. */
unsigned lp_spreq_connections(void);

/* lp_spreq_busy_poll_set - how long a call polls for its reply, yielding
 * between looks, before it sleeps, for every requester in the process
 * (default 50 µs; 0: never; at most 1000). */
void lp_spreq_busy_poll_set(unsigned us);

#endif /* LUNAR_PROTO_SP_REQ_H */
