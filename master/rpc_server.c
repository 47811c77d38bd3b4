/*
 * rpc_server.c - a master served on nng's REQ/REP wire by lp_sprep
 * (proto/sp_rep.h): each request is unpacked, dispatched and its reply
 * packed in place on the worker its bytes woke, which never blocks on
 * anything but the master's short locks.
 */
#include "rpc_server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
#include "sp_rep.h"

#define CONNS_MAX 4096 /* connections served at once (proxies pool theirs) */

struct mst_server {
	struct mst_master *m;
	struct lp_sprep *rep;
	int keyed;
	struct auth_key key;	  /* with keyed: what every caller must prove */
	struct mst_sesstab *sess; /* with keyed */
	uint64_t warned_ms;	  /* last refusal logged; atomic */
};

/* rep packed into msg (the request's bytes gone) after room bytes left
 * for an envelope's fixed part; rep is freed. 0 or -ENOMEM. */
static int pack_reply(ProtobufCMessage *rep, struct lp_spmsg *msg, size_t room)
{
	size_t n = protobuf_c_message_get_packed_size(rep);
	int rc = lp_spmsg_reply(msg, room + n);

	if (!rc)
		protobuf_c_message_pack(rep, msg->body + room);
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
static int serve_plain(struct mst_master *m, struct lp_spmsg *msg)
{
	const struct lp_method *mt;
	ProtobufCMessage *req, *rep;
	int rc = lp_request_unpack(msg->body, msg->len, &mt, &req);

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
static int reject(struct mst_server *s, enum mst_reject why)
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
	if (now - last >= 1000 && lc_cas(&s->warned_ms, &last, now))
		LC_WARN("master", "RPC peer closed: %s (lunar_master_rpc_rejected_total)",
			words[why]);
	return -EPERM;
}

/* e encoded into msg (emptied first). 0 or -ENOMEM. */
static int put_env(struct lp_spmsg *msg, const struct lp_env *e)
{
	size_t n = lp_env_size(e);

	if (lp_spmsg_reply(msg, n))
		return -ENOMEM;
	return lp_env_encode(e, msg->body, n) < 0 ? -ENOMEM : 0;
}

static int keyed_hello(struct mst_server *s, struct lp_spmsg *msg, const struct lp_env *e)
{
	unsigned char hello[AUTH_HELLO_BYTES], proof[AUTH_PROOF_BYTES];
	struct lp_env r;
	int rc = mst_sess_hello(s->sess, &s->key, e, &r, hello, proof);

	if (rc)
		return reject(s, rc == -EBUSY ? MST_REJ_TABLE_FULL : MST_REJ_BAD_PROOF);
	return put_env(msg, &r);
}

static int keyed_proof(struct mst_server *s, struct lp_spmsg *msg, const struct lp_env *e)
{
	unsigned char tag[AUTH_TAG_BYTES];
	struct lp_env r;
	int rc = mst_sess_prove(s->sess, &s->key, e, &r, tag);

	if (rc)
		return reject(s, rc == -ENOENT ? MST_REJ_NO_HELLO : MST_REJ_BAD_PROOF);
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
static int put_reply(struct lp_spmsg *msg, const struct mst_sess_view *v, uint64_t ctr,
		     ProtobufCMessage *rep)
{
	unsigned char tag[AUTH_TAG_BYTES];
	struct lp_env r = {.kind = LP_KIND_REPLY, .ctr = ctr};
	size_t fixed = lp_env_size(&r);
	int rc = pack_reply(rep, msg, fixed);

	if (rc)
		return rc;
	r.body = msg->body + fixed;
	r.body_len = msg->len - fixed;
	lp_env_tag(v->keys.tx_key, &r, tag);
	r.tag = tag;
	r.body_len = 0; /* the fixed part only: the body is in place */
	return lp_env_encode(&r, msg->body, fixed) < 0 ? -ENOMEM : 0;
}

/* An authentic CALL overtaken by more than the replay window's worth of
 * others (a caller's thread held up between numbering it and sending it):
 * not run, and answered STALE, tagged, so the caller sends it again with a
 * new counter instead of losing its connection. */
static int stale_answer(struct mst_server *s, struct lp_spmsg *msg, const struct mst_sess_view *v,
			uint64_t ctr)
{
	unsigned char tag[AUTH_TAG_BYTES];
	struct lp_env r = {.kind = LP_KIND_STALE, .ctr = ctr};

	mst_metrics_stale(s->m);
	lp_env_tag(v->keys.tx_key, &r, tag);
	r.tag = tag;
	return put_env(msg, &r);
}

static int keyed_call(struct mst_server *s, struct lp_spmsg *msg, const struct lp_env *e)
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
	if (rc == -ESTALE) {
		rc = stale_answer(s, msg, &v, e->ctr);
		sodium_memzero(&v, sizeof(v));
		return rc;
	}
	if (rc)
		return reject(s, rc == -EALREADY ? MST_REJ_REPLAY : MST_REJ_BAD_MAC);
	rc = lp_request_unpack(e->body, e->body_len, &mt, &req);
	if (rc == -ENOSYS) {
		rep = unknown_method_reply(s->m);
		rc = rep ? 0 : -ENOMEM;
		mt = NULL;
	} else if (rc) {
		rc = reject(s, MST_REJ_BAD_REQUEST);
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
static int serve_keyed(struct mst_server *s, struct lp_spmsg *msg)
{
	struct lp_env e;

	if (!lp_env_is(msg->body, msg->len))
		return reject(s, MST_REJ_PLAIN);
	if (lp_env_decode(msg->body, msg->len, &e))
		return reject(s, MST_REJ_MALFORMED);
	switch (e.kind) {
	case LP_KIND_HELLO: return keyed_hello(s, msg, &e);
	case LP_KIND_PROOF: return keyed_proof(s, msg, &e);
	case LP_KIND_CALL: return keyed_call(s, msg, &e);
	default: return reject(s, MST_REJ_MALFORMED);
	}
}

/* lp_sprep's handler: the request in msg answered in place; a negative
 * code closes its connection unanswered. */
static int serve(void *arg, struct lp_spmsg *msg)
{
	struct mst_server *s = arg;
	int rc = s->keyed ? serve_keyed(s, msg) : serve_plain(s->m, msg);

	if (rc && rc != -EPERM)
		LC_DEBUG("master", "request dropped: %d", rc);
	return rc;
}

/* The module's edge: lp_sprep's codes become SPEC §9's (logged by the
 * caller); out of memory is INTERNAL, as mst_code makes it. */
static int code_of(int rc)
{
	switch (rc) {
	case -EADDRINUSE: return LUNAR_ERR_BUSY;
	case -EINVAL:
	case -EADDRNOTAVAIL: return LUNAR_ERR_INVALID_PARAMS;
	default: return LUNAR_ERR_INTERNAL;
	}
}

int mst_server_start(struct mst_master *m, const char *url, unsigned nworkers,
		     const struct auth_key *key, struct mst_server **out)
{
	struct mst_server *s = calloc(1, sizeof(*s));
	struct lp_sprep_cfg cfg = {.workers = nworkers ? nworkers : 1,
				   .max_conns = CONNS_MAX,
				   .max_request = LP_MAX_MSG,
				   .fn = serve};
	int rc;

	if (!s || (key && mst_sesstab_create(&s->sess))) {
		LC_ERROR("master", "out of memory for the RPC server");
		free(s);
		return LUNAR_ERR_INTERNAL;
	}
	s->m = m;
	s->keyed = key != NULL;
	if (key)
		s->key = *key;
	cfg.arg = s;
	rc = lp_sprep_start(url, &cfg, &s->rep);
	if (rc) {
		LC_ERROR("master", "listen on %s: %s", url, strerror(-rc));
		mst_server_stop(s);
		return code_of(rc);
	}
	*out = s;
	return 0;
}

uint16_t mst_server_port(const struct mst_server *s)
{
	return lp_sprep_port(s->rep);
}

void mst_server_stop(struct mst_server *s)
{
	if (!s)
		return;
	lp_sprep_stop(s->rep);
	mst_sesstab_destroy(s->sess);
	auth_key_wipe(&s->key);
	free(s);
}
