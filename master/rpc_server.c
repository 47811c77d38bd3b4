/*
 * rpc_server.c - a master served over nng REP: nworkers contexts, each an
 * aio callback state machine (receive -> unpack -> mst_dispatch -> pack ->
 * send -> receive). Callbacks run on nng's threads and never block on
 * anything but the master's short locks.
 */
#include "rpc_server.h"

#include <errno.h>
#include <stdlib.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <sodium.h>

#include "auth.h"
#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "master.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "rpc.h"
#include "rpc_auth.h"
#include "rpc_sess.h"

enum wstate { W_RECV, W_SEND };

struct worker {
	struct mst_server *s;
	nng_aio *aio;
	nng_ctx ctx;
	enum wstate state;
};

struct mst_server {
	struct mst_master *m;
	nng_socket sock;
	nng_listener l;
	uint16_t port;
	unsigned n;
	struct worker *w;
	int keyed;
	struct auth_key key;	  /* with keyed: what every caller must prove */
	struct mst_sesstab *sess; /* with keyed */
	uint64_t warned_ms;	  /* last refusal logged; atomic */
};

/* rep packed into msg (emptied first) after room bytes left for an
 * envelope's fixed part; rep is freed. 0 or -ENOMEM. */
static int pack_reply(ProtobufCMessage *rep, nng_msg *msg, size_t room)
{
	size_t n = protobuf_c_message_get_packed_size(rep);
	int rc;

	nng_msg_clear(msg);
	rc = nng_msg_realloc(msg, room + n) ? -ENOMEM : 0;
	if (!rc)
		protobuf_c_message_pack(rep, (uint8_t *)nng_msg_body(msg) + room);
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* The reply to a request of a method this build does not know (a newer
 * caller's): told so at once, not left to time out. */
static ProtobufCMessage *unknown_method_reply(struct mst_master *m)
{
	return lp_reply_new(&lunar__status_reply__descriptor, LUNAR_ERR_PROTOCOL, mst_view(m));
}

/* Keyless: turn the request in msg into its reply, in place. 0, or a
 * negative code when there is nothing to answer with. */
static int serve_plain(struct mst_master *m, nng_msg *msg)
{
	const struct lp_method *mt;
	ProtobufCMessage *req, *rep;
	int rc = lp_request_unpack(nng_msg_body(msg), nng_msg_len(msg), &mt, &req);

	if (rc == -ENOSYS) {
		rep = unknown_method_reply(m);
		rc = rep ? 0 : -ENOMEM;
	} else if (!rc) {
		rc = mst_dispatch(m, mt->id, req, &rep);
		protobuf_c_message_free_unpacked(req, NULL);
	}
	return rc ? rc : pack_reply(rep, msg, 0);
}

/* A peer that failed a check gets no answer, only its connection closed
 * (SPEC §13); counted, and logged at most once a second. -EPERM. */
static int reject(struct mst_server *s, nng_msg *msg, enum mst_reject why)
{
	static const char *const words[MST_REJ_MAX] = {
	    [MST_REJ_PLAIN] = "a request without authentication",
	    [MST_REJ_MALFORMED] = "a malformed envelope",
	    [MST_REJ_BAD_PROOF] = "a handshake without the cluster key",
	    [MST_REJ_NO_HELLO] = "a proof for no handshake",
	    [MST_REJ_BAD_MAC] = "a call with a wrong tag",
	    [MST_REJ_REPLAY] = "a replayed call",
	    [MST_REJ_BAD_REQUEST] = "an undecodable request",
	    [MST_REJ_TABLE_FULL] = "a handshake with every session slot taken",
	};
	uint64_t now = lc_now_ms(), last = LC_READ_ONCE(s->warned_ms);

	mst_metrics_reject(s->m, why);
	nng_pipe_close(nng_msg_get_pipe(msg));
	if (now - last >= 1000 && lc_cas(&s->warned_ms, &last, now))
		LC_WARN("master", "RPC peer closed: %s (lunar_master_rpc_rejected_total)",
			words[why]);
	return -EPERM;
}

/* e encoded into msg (emptied first). 0 or -ENOMEM. */
static int put_env(nng_msg *msg, const struct lp_env *e)
{
	size_t n = lp_env_size(e);

	nng_msg_clear(msg);
	if (nng_msg_realloc(msg, n))
		return -ENOMEM;
	return lp_env_encode(e, nng_msg_body(msg), n) < 0 ? -ENOMEM : 0;
}

static int keyed_hello(struct mst_server *s, nng_msg *msg, const struct lp_env *e)
{
	unsigned char hello[AUTH_HELLO_BYTES], proof[AUTH_PROOF_BYTES];
	struct lp_env r;
	int rc = mst_sess_hello(s->sess, &s->key, e, &r, hello, proof);

	if (rc)
		return reject(s, msg, rc == -EBUSY ? MST_REJ_TABLE_FULL : MST_REJ_BAD_PROOF);
	return put_env(msg, &r);
}

static int keyed_proof(struct mst_server *s, nng_msg *msg, const struct lp_env *e)
{
	unsigned char tag[AUTH_TAG_BYTES];
	struct lp_env r;
	int rc = mst_sess_prove(s->sess, &s->key, e, &r, tag);

	if (rc)
		return reject(s, msg, rc == -ENOENT ? MST_REJ_NO_HELLO : MST_REJ_BAD_PROOF);
	return put_env(msg, &r);
}

/* The authentic request's reply: refused UNAUTHORIZED by the session's
 * identity, or dispatched with its segment secrets sealed. */
static int keyed_dispatch(struct mst_server *s, const struct mst_sess_view *v,
			  const struct lp_method *mt, ProtobufCMessage *req, ProtobufCMessage **rep)
{
	int rc;

	if (mst_sess_guard(s->sess, v, mt, req)) {
		mst_metrics_unauthorized(s->m, mt->id);
		*rep = lp_reply_new(mt->rep, LUNAR_ERR_UNAUTHORIZED, MST_VIEW);
		return *rep ? 0 : -ENOMEM;
	}
	rc = mst_dispatch(s->m, mt->id, req, rep);
	if (!rc && (rc = lp_secrets_seal(&v->keys, mt->id, *rep)))
		protobuf_c_message_free_unpacked(*rep, NULL);
	return rc;
}

/* rep packed into msg as the REPLY to counter ctr, tagged for v. */
static int put_reply(nng_msg *msg, const struct mst_sess_view *v, uint64_t ctr,
		     ProtobufCMessage *rep)
{
	unsigned char tag[AUTH_TAG_BYTES];
	struct lp_env r = {.kind = LP_KIND_REPLY, .ctr = ctr};
	size_t fixed = lp_env_size(&r);
	int rc = pack_reply(rep, msg, fixed);

	if (rc)
		return rc;
	r.body = (uint8_t *)nng_msg_body(msg) + fixed;
	r.body_len = nng_msg_len(msg) - fixed;
	lp_env_tag(v->keys.tx_key, &r, tag);
	r.tag = tag;
	r.body_len = 0; /* the fixed part only: the body is in place */
	return lp_env_encode(&r, nng_msg_body(msg), fixed) < 0 ? -ENOMEM : 0;
}

static int keyed_call(struct mst_server *s, nng_msg *msg, const struct lp_env *e)
{
	const struct lp_method *mt;
	struct mst_sess_view v;
	ProtobufCMessage *req, *rep;
	int rc = mst_sess_call(s->sess, e, &v);

	/* A session we do not know (we restarted, or it expired) gets a small
	 * unauthenticated answer so the client opens a new one at once
	 * instead of timing out: it tells nothing but that the id it sent is
	 * not open here, which anyone could learn by trying. */
	if (rc == -ENOENT) {
		struct lp_env r = {.kind = LP_KIND_NO_SESSION, .sid = e->sid};

		return put_env(msg, &r);
	}
	if (rc)
		return reject(s, msg, rc == -EALREADY ? MST_REJ_REPLAY : MST_REJ_BAD_MAC);
	rc = lp_request_unpack(e->body, e->body_len, &mt, &req);
	if (rc == -ENOSYS) {
		rep = unknown_method_reply(s->m);
		rc = rep ? 0 : -ENOMEM;
		mt = NULL;
	} else if (rc) {
		rc = reject(s, msg, MST_REJ_BAD_REQUEST);
	} else {
		rc = keyed_dispatch(s, &v, mt, req, &rep);
		protobuf_c_message_free_unpacked(req, NULL);
	}
	if (!rc)
		rc = put_reply(msg, &v, e->ctr, rep);
	sodium_memzero(&v, sizeof(v));
	return rc;
}

/* Keyed: every message is an envelope (rpc_auth.h); anything else closes
 * its peer. 0 with the answer in msg, or a negative code. */
static int serve_keyed(struct mst_server *s, nng_msg *msg)
{
	struct lp_env e;

	if (!lp_env_is(nng_msg_body(msg), nng_msg_len(msg)))
		return reject(s, msg, MST_REJ_PLAIN);
	if (lp_env_decode(nng_msg_body(msg), nng_msg_len(msg), &e))
		return reject(s, msg, MST_REJ_MALFORMED);
	switch (e.kind) {
	case LP_KIND_HELLO: return keyed_hello(s, msg, &e);
	case LP_KIND_PROOF: return keyed_proof(s, msg, &e);
	case LP_KIND_CALL: return keyed_call(s, msg, &e);
	default: return reject(s, msg, MST_REJ_MALFORMED);
	}
}

static void worker_cb(void *arg)
{
	struct worker *w = arg;
	int rv = nng_aio_result(w->aio);
	nng_msg *msg;

	if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
		return; /* stopping */
	if (w->state == W_SEND) {
		if (rv)
			nng_msg_free(nng_aio_get_msg(w->aio));
	} else if (!rv) {
		msg = nng_aio_get_msg(w->aio);
		rv = w->s->keyed ? serve_keyed(w->s, msg) : serve_plain(w->s->m, msg);
		if (!rv) {
			nng_aio_set_msg(w->aio, msg);
			w->state = W_SEND;
			nng_ctx_send(w->ctx, w->aio);
			return;
		}
		LC_DEBUG("master", "request dropped: %d", rv);
		nng_msg_free(msg);
	}
	w->state = W_RECV;
	nng_ctx_recv(w->ctx, w->aio);
}

/* The module's edge: nng's codes become SPEC §9's (the nng error is logged
 * by the caller); out of memory is INTERNAL, as mst_code makes it. */
static int code_of_nng(int rv)
{
	switch (rv) {
	case NNG_EADDRINUSE: return LUNAR_ERR_BUSY;
	case NNG_EADDRINVAL:
	case NNG_EINVAL:
	case NNG_ENOTSUP: return LUNAR_ERR_INVALID_PARAMS;
	default: return LUNAR_ERR_INTERNAL;
	}
}

static int workers_start(struct mst_server *s)
{
	int rv;

	for (unsigned i = 0; i < s->n; i++) {
		struct worker *w = &s->w[i];

		w->s = s;
		rv = nng_aio_alloc(&w->aio, worker_cb, w);
		if (rv)
			return rv;
		rv = nng_ctx_open(&w->ctx, s->sock);
		if (rv)
			return rv;
		w->state = W_RECV;
		nng_ctx_recv(w->ctx, w->aio);
	}
	return 0;
}

static int listen_on(struct mst_server *s, const char *url)
{
	int port = 0, rv;

	rv = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, LP_MAX_MSG);
	if (!rv)
		rv = nng_listener_create(&s->l, s->sock, url);
	if (!rv)
		rv = nng_listener_start(s->l, 0);
	if (rv)
		return rv;
	if (nng_listener_get_int(s->l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
		s->port = (uint16_t)port;
	return 0;
}

int mst_server_start(struct mst_master *m, const char *url, unsigned nworkers,
		     const struct auth_key *key, struct mst_server **out)
{
	struct mst_server *s = calloc(1, sizeof(*s));
	int rv;

	if (!s)
		return LUNAR_ERR_INTERNAL;
	s->m = m;
	s->keyed = key != NULL;
	if (key)
		s->key = *key;
	s->n = nworkers ? nworkers : 1;
	s->w = calloc(s->n, sizeof(*s->w));
	if (!s->w || (key && mst_sesstab_create(&s->sess))) {
		LC_ERROR("master", "out of memory for %u workers", s->n);
		auth_key_wipe(&s->key);
		free(s->w);
		free(s);
		return LUNAR_ERR_INTERNAL;
	}
	rv = nng_rep0_open(&s->sock);
	if (rv) {
		LC_ERROR("master", "nng_rep0_open: %s", nng_strerror(rv));
		mst_sesstab_destroy(s->sess);
		auth_key_wipe(&s->key);
		free(s->w);
		free(s);
		return code_of_nng(rv);
	}
	rv = listen_on(s, url);
	if (!rv)
		rv = workers_start(s);
	if (rv) {
		LC_ERROR("master", "listen on %s: %s", url, nng_strerror(rv));
		mst_server_stop(s);
		return code_of_nng(rv);
	}
	*out = s;
	return 0;
}

uint16_t mst_server_port(const struct mst_server *s)
{
	return s->port;
}

void mst_server_stop(struct mst_server *s)
{
	if (!s)
		return;
	/* Accept no more peers first, so no connection arrives while the
	 * contexts and the socket close (LeakSanitizer once found a pipe of
	 * nng's own still allocated at a master's exit). */
	if (nng_listener_id(s->l) > 0)
		nng_listener_close(s->l);
	/* Stop each worker's aio, then close its context, then the socket:
	 * closing the socket under open contexts can wait forever (nng 1.5). */
	for (unsigned i = 0; i < s->n; i++) {
		if (s->w[i].aio)
			nng_aio_stop(s->w[i].aio);
		if (nng_ctx_id(s->w[i].ctx) > 0)
			nng_ctx_close(s->w[i].ctx);
	}
	nng_close(s->sock);
	for (unsigned i = 0; i < s->n; i++)
		nng_aio_free(s->w[i].aio);
	free(s->w);
	mst_sesstab_destroy(s->sess);
	auth_key_wipe(&s->key);
	free(s);
}
