/*
 * rpc_client.c - the master RPC's client (rpc_client.h): plain framed
 * requests for a keyless master; with a cluster key, a session opened by
 * the three-message handshake and every call wrapped in a CALL envelope
 * whose reply must carry our counter and the master's tag. The messages
 * travel on sp_req.h's requester: nng's wire, the calling thread's own
 * exchange.
 */
#include "rpc_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "rpc_auth.h"
#include "sp_req.h"

#define NO_SESSION    1	     /* call_in: the master forgot our session */
#define STALE	      2	     /* call_in: the master did not run it: too old */
#define STALE_TRIES   8	     /* sends of one call answered STALE each time */
#define WARN_EVERY_MS 10000u /* how often a refused key is logged again */

/* An open session; c->cur holds one reference, each call using it one. */
struct lp_csess {
	struct auth_session s;
	uint64_t sid;
	unsigned refs; /* under c->lock */
};

struct lp_client {
	struct lp_spreq *req;
	int keyed;
	uint32_t role;
	struct auth_key key;
	pthread_mutex_t lock;	   /* cur, refs, warned_ms */
	pthread_mutex_t hs_lock;   /* one handshake at a time */
	pthread_mutex_t send_lock; /* counters are taken and tagged one at a time */
	struct lp_csess *cur;
	uint64_t warned_ms;
};

/* A tool's dial (LP_CLIENT_DIAL_NOW) gives up after this long. */
#define DIAL_NOW_MS 2000

int lp_client_create(const char *url, const struct auth_key *key, uint32_t role, unsigned flags,
		     struct lp_client **out)
{
	struct lp_client *c;
	int rv;

	if (key && !auth_role_valid(role))
		return LUNAR_ERR_INVALID_PARAMS;
	c = calloc(1, sizeof(*c));
	if (!c)
		return LUNAR_ERR_INTERNAL;
	rv = lp_spreq_alloc(url, LP_MAX_MSG, &c->req);
	if (!rv && (flags & LP_CLIENT_DIAL_NOW))
		rv = lp_spreq_dial(c->req, lc_now_ms() + DIAL_NOW_MS);
	if (rv) {
		LC_ERROR("rpc", "master client for %s: %s", url,
			 rv == -EINVAL ? "not tcp://HOST:PORT or ipc://PATH" : strerror(-rv));
		lp_spreq_free(c->req);
		free(c);
		return LUNAR_ERR_INVALID_PARAMS;
	}
	c->keyed = key != NULL;
	if (key)
		c->key = *key;
	c->role = role;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->hs_lock, NULL);
	pthread_mutex_init(&c->send_lock, NULL);
	*out = c;
	return 0;
}

void lp_client_on_drop(struct lp_client *c, void (*fn)(void *arg), void *arg)
{
	lp_spreq_on_drop(c->req, fn, arg);
}

void lp_client_close(struct lp_client *c)
{
	if (c)
		lp_spreq_close(c->req);
}

void lp_client_destroy(struct lp_client *c)
{
	if (!c)
		return;
	lp_spreq_free(c->req);
	if (c->cur) {
		sodium_memzero(c->cur, sizeof(*c->cur));
		free(c->cur);
	}
	auth_key_wipe(&c->key);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->hs_lock);
	pthread_mutex_destroy(&c->send_lock);
	free(c);
}

/* lp_spreq's codes as SPEC §9's. */
static int code_of(int rc)
{
	switch (rc) {
	case 0: return 0;
	case -ETIMEDOUT: return LUNAR_ERR_RPC_TIMEOUT;
	case -ENOMEM: return LUNAR_ERR_INTERNAL;
	default: return LUNAR_ERR_RPC_FAIL;
	}
}

/* The reply's inner bytes to a Status-bearing message of mt, or NULL. */
static ProtobufCMessage *reply_of(const struct lp_method *mt, const void *buf, size_t len)
{
	ProtobufCMessage *rep = lp_reply_unpack(mt, buf, len);

	if (rep && lp_status(rep))
		return rep;
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	LC_WARN("rpc", "master sent an undecodable %s reply", mt->name);
	return NULL;
}

static int call_plain(struct lp_client *c, const struct lp_method *mt, const void *buf, size_t len,
		      ProtobufCMessage **rep, uint64_t deadline)
{
	void *reply;
	size_t rlen;
	int rc = code_of(lp_spreq_call(c->req, buf, len, &reply, &rlen, deadline));

	if (rc)
		return rc;
	*rep = reply_of(mt, reply, rlen);
	free(reply);
	return *rep ? 0 : LUNAR_ERR_RPC_FAIL;
}

/* e encoded into a new buffer (*out, *len). */
static int env_buf(const struct lp_env *e, void **out, size_t *len)
{
	size_t n = lp_env_size(e);

	if (!n || !(*out = malloc(n)))
		return LUNAR_ERR_INTERNAL;
	if (lp_env_encode(e, *out, n) < 0) {
		free(*out);
		return LUNAR_ERR_INTERNAL;
	}
	*len = n;
	return 0;
}

/* One handshake message out, its reply decoded into *r (of kind want)
 * with the reply's bytes in *keep (the caller frees it; r points into it). */
static int hs_step(struct lp_client *c, const struct lp_env *e, uint32_t want, struct lp_env *r,
		   void **keep, uint64_t deadline)
{
	void *msg;
	size_t len, rlen;
	int rc;

	if ((rc = env_buf(e, &msg, &len)))
		return rc;
	rc = code_of(lp_spreq_call(c->req, msg, len, keep, &rlen, deadline));
	free(msg);
	if (rc)
		return rc;
	if (lp_env_decode(*keep, rlen, r) || r->kind != want) {
		free(*keep);
		return LUNAR_ERR_RPC_FAIL;
	}
	return 0;
}

/* A refused key is worth one line every WARN_EVERY_MS, not one a call. */
static void warn_key(struct lp_client *c, const char *why)
{
	uint64_t now = lc_now_ms();
	int say;

	pthread_mutex_lock(&c->lock);
	say = !c->warned_ms || now - c->warned_ms >= WARN_EVERY_MS;
	if (say)
		c->warned_ms = now;
	pthread_mutex_unlock(&c->lock);
	if (say)
		LC_ERROR("rpc", "master refused our cluster key: %s", why);
}

/* Second half of the handshake: prove the key, derive the session, and
 * see the master's tag on its answer (it holds the session too). */
static int hs_prove(struct lp_client *c, struct auth_hs *hs, uint64_t sid, uint64_t deadline,
		    struct lp_csess *cs)
{
	unsigned char proof[AUTH_PROOF_BYTES];
	struct lp_env e = {.kind = LP_KIND_PROOF, .sid = sid, .proof = proof}, r;
	void *keep;
	int rc;

	auth_hs_proof(hs, &c->key, c->role, proof);
	if (auth_hs_finish(hs, &c->key, c->role, &cs->s))
		return LUNAR_ERR_RPC_FAIL;
	cs->sid = sid;
	rc = hs_step(c, &e, LP_KIND_PROOF_REPLY, &r, &keep, deadline);
	if (rc == LUNAR_ERR_RPC_TIMEOUT || rc == LUNAR_ERR_RPC_FAIL)
		warn_key(c, "no answer to our proof (a different --cluster-key or role?)");
	if (rc)
		return rc;
	rc = r.sid == sid && !lp_env_tag_check(cs->s.rx_key, &r) ? 0 : LUNAR_ERR_RPC_FAIL;
	free(keep);
	return rc;
}

/* The three messages that open a session (rpc_auth.h). */
static int handshake(struct lp_client *c, uint64_t deadline, struct lp_csess **out)
{
	unsigned char hello[AUTH_HELLO_BYTES];
	struct lp_env e = {.kind = LP_KIND_HELLO, .role = c->role, .hello = hello}, r;
	struct lp_csess *cs;
	struct auth_hs hs;
	void *keep;
	uint64_t sid;
	int rc;

	auth_hs_start(&hs, 1, hello);
	rc = hs_step(c, &e, LP_KIND_HELLO_REPLY, &r, &keep, deadline);
	if (rc)
		goto out;
	sid = r.sid;
	rc = auth_hs_peer(&hs, r.hello);
	if (!rc && (rc = auth_hs_verify(&hs, &c->key, AUTH_ROLE_SERVER, r.proof)))
		warn_key(c, "its proof does not match our key (a different --cluster-key?)");
	free(keep);
	if (rc)
		goto out;
	cs = calloc(1, sizeof(*cs));
	if (!cs) {
		rc = LUNAR_ERR_INTERNAL;
		goto out;
	}
	rc = hs_prove(c, &hs, sid, deadline, cs);
	if (rc) {
		sodium_memzero(cs, sizeof(*cs));
		free(cs);
		goto out;
	}
	*out = cs;
out:
	sodium_memzero(&hs, sizeof(hs));
	return rc;
}

static struct lp_csess *sess_ref(struct lp_client *c)
{
	struct lp_csess *cs;

	pthread_mutex_lock(&c->lock);
	cs = c->cur;
	if (cs)
		cs->refs++;
	pthread_mutex_unlock(&c->lock);
	return cs;
}

static void sess_put(struct lp_client *c, struct lp_csess *cs)
{
	unsigned left;

	pthread_mutex_lock(&c->lock);
	left = --cs->refs;
	pthread_mutex_unlock(&c->lock);
	if (!left) {
		sodium_memzero(cs, sizeof(*cs));
		free(cs);
	}
}

/* The master forgot cs: the next call opens a new session. */
static void sess_drop(struct lp_client *c, struct lp_csess *cs)
{
	pthread_mutex_lock(&c->lock);
	if (c->cur == cs) {
		c->cur = NULL;
		cs->refs--; /* cur's reference; ours keeps it alive */
	}
	pthread_mutex_unlock(&c->lock);
}

/* The current session, opened first when there is none. */
static int sess_get(struct lp_client *c, uint64_t deadline, struct lp_csess **out)
{
	struct lp_csess *cs;
	int rc = 0;

	if ((*out = sess_ref(c)))
		return 0;
	pthread_mutex_lock(&c->hs_lock);
	if (!(*out = sess_ref(c)) && !(rc = handshake(c, deadline, &cs))) {
		pthread_mutex_lock(&c->lock);
		cs->refs = 2; /* cur's and ours */
		c->cur = cs;
		pthread_mutex_unlock(&c->lock);
		*out = cs;
	}
	pthread_mutex_unlock(&c->hs_lock);
	return rc;
}

/* Send the CALL on x. Its counter is taken and tagged under send_lock
 * and the bytes sent right after, so counters reach the master about in
 * order (over several connections) and stay well inside its 64-counter
 * window; the send itself, which may wait on a full socket, holds no
 * lock. 0, or a code of lp_spreq_send's (-ENOMEM for the envelope). */
static int call_send(struct lp_client *c, struct lp_csess *cs, struct lp_env *e,
		     struct lp_spreq_xchg *x)
{
	unsigned char tag[AUTH_TAG_BYTES];
	void *msg;
	size_t len;
	int rc;

	e->tag = tag;
	pthread_mutex_lock(&c->send_lock);
	e->ctr = auth_tx_next(&cs->s);
	lp_env_tag(cs->s.tx_key, e, tag);
	rc = env_buf(e, &msg, &len) ? -ENOMEM : 0;
	pthread_mutex_unlock(&c->send_lock);
	e->tag = NULL;
	if (rc)
		return rc;
	rc = lp_spreq_send(c->req, x, msg, len);
	free(msg);
	return rc;
}

/* The reply to the CALL numbered ctr: ours, untouched, secrets opened. */
static int call_reply(struct lp_csess *cs, const struct lp_method *mt, uint64_t ctr,
		      const void *reply, size_t rlen, ProtobufCMessage **rep)
{
	struct lp_env r;

	if (lp_env_decode(reply, rlen, &r))
		return LUNAR_ERR_RPC_FAIL;
	if (r.kind == LP_KIND_NO_SESSION && r.sid == cs->sid)
		return NO_SESSION;
	if (r.kind == LP_KIND_STALE && r.ctr == ctr && !lp_env_tag_check(cs->s.rx_key, &r))
		return STALE;
	if (r.kind != LP_KIND_REPLY || r.ctr != ctr || lp_env_tag_check(cs->s.rx_key, &r)) {
		LC_WARN("rpc", "master sent an unauthentic %s reply", mt->name);
		return LUNAR_ERR_RPC_FAIL;
	}
	*rep = reply_of(mt, r.body, r.body_len);
	if (!*rep)
		return LUNAR_ERR_RPC_FAIL;
	if (lp_secrets_unseal(&cs->s, mt->id, *rep)) {
		protobuf_c_message_free_unpacked(*rep, NULL);
		LC_WARN("rpc", "a segment secret in the %s reply does not open", mt->name);
		return LUNAR_ERR_RPC_FAIL;
	}
	return 0;
}

static int call_in(struct lp_client *c, struct lp_csess *cs, const struct lp_method *mt,
		   const void *buf, size_t len, ProtobufCMessage **rep, uint64_t deadline)
{
	struct lp_env e = {.kind = LP_KIND_CALL, .sid = cs->sid, .body = buf, .body_len = len};
	struct lp_spreq_xchg x;
	void *reply;
	size_t rlen;
	int rc;

	if ((rc = code_of(lp_spreq_begin(c->req, deadline, &x))))
		return rc;
	rc = code_of(lp_spreq_end(c->req, &x, call_send(c, cs, &e, &x), &reply, &rlen));
	if (rc)
		return rc;
	rc = call_reply(cs, mt, e.ctr, reply, rlen, rep);
	free(reply);
	return rc;
}

/*
 * A call on the session, opened again once if the master forgot it, and
 * sent again with a new counter while the master answers that it was
 * overtaken by more calls than its replay window holds (our thread was held
 * up between numbering and sending it); neither answer means it ran.
 */
static int call_keyed(struct lp_client *c, const struct lp_method *mt, const void *buf, size_t len,
		      ProtobufCMessage **rep, uint64_t deadline)
{
	unsigned forgotten = 0, stale = 0;
	struct lp_csess *cs;
	int rc;

	do {
		if ((rc = sess_get(c, deadline, &cs)))
			return rc;
		rc = call_in(c, cs, mt, buf, len, rep, deadline);
		if (rc == NO_SESSION) {
			LC_INFO("rpc", "master does not know our session (restarted?): "
				       "opening a new one");
			sess_drop(c, cs);
		}
		sess_put(c, cs);
	} while ((rc == NO_SESSION && !forgotten++) || (rc == STALE && ++stale < STALE_TRIES));
	return rc == NO_SESSION || rc == STALE ? LUNAR_ERR_RPC_FAIL : rc;
}

int lp_client_call(struct lp_client *c, const struct lp_method *mt, const ProtobufCMessage *req,
		   ProtobufCMessage **rep, uint64_t timeout_ms)
{
	uint64_t deadline = lc_now_ms() + timeout_ms;
	void *buf;
	size_t len;
	int rc;

	if (lp_request_pack(mt->id, req, &buf, &len))
		return LUNAR_ERR_INTERNAL;
	if (c->keyed)
		rc = call_keyed(c, mt, buf, len, rep, deadline);
	else
		rc = call_plain(c, mt, buf, len, rep, deadline);
	free(buf);
	return rc;
}
