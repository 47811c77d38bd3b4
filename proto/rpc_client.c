/*
 * rpc_client.c - the master RPC's client (rpc_client.h): plain framed
 * requests for a keyless master; with a cluster key, a session opened by
 * the three-message handshake and every call wrapped in a CALL envelope
 * whose reply must carry our counter and the master's tag.
 */
#include "rpc_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <sodium.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "rpc_auth.h"

#define NO_SESSION    1	     /* call_in: the master forgot our session */
#define WARN_EVERY_MS 10000u /* how often a refused key is logged again */

/* An open session; c->cur holds one reference, each call using it one. */
struct lp_csess {
	struct auth_session s;
	uint64_t sid;
	unsigned refs; /* under c->lock */
};

/* nng 1.5 has no synchronous context calls: one aio per exchange, waited
 * on, the send and the receive within one deadline. */
struct xchg {
	struct lp_client *c;
	struct xchg *next; /* in c->calls */
	nng_ctx ctx;
	nng_aio *aio;
	uint64_t deadline;
};

struct lp_client {
	nng_socket sock;
	atomic_bool closed;	   /* set once, then under lock: no exchange starts */
	struct xchg *calls;	   /* exchanges with an open context, under lock */
	pthread_cond_t calls_done; /* the last of them left after close */
	int keyed;
	uint32_t role;
	struct auth_key key;
	pthread_mutex_t lock;	   /* cur, refs, warned_ms, calls */
	pthread_mutex_t hs_lock;   /* one handshake at a time */
	pthread_mutex_t send_lock; /* counters leave in the order they are taken */
	struct lp_csess *cur;
	uint64_t warned_ms;
	void (*on_drop)(void *arg);
	void *drop_arg;
};

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
	c->keyed = key != NULL;
	if (key)
		c->key = *key;
	c->role = role;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->hs_lock, NULL);
	pthread_mutex_init(&c->send_lock, NULL);
	pthread_cond_init(&c->calls_done, NULL);
	rv = nng_req0_open(&c->sock);
	if (rv)
		goto err_free;
	if ((rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) ||
	    (rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, LP_MAX_MSG)) ||
	    (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 1000)))
		goto err_close;
	/* Non-blocking dial: the master may come up after us; nng keeps trying. */
	rv = nng_dial(c->sock, url, NULL, flags & LP_CLIENT_DIAL_NOW ? 0 : NNG_FLAG_NONBLOCK);
	if (rv)
		goto err_close;
	*out = c;
	return 0;
err_close:
	nng_close(c->sock);
err_free:
	LC_ERROR("rpc", "master client for %s: %s", url, nng_strerror(rv));
	auth_key_wipe(&c->key);
	pthread_cond_destroy(&c->calls_done);
	free(c);
	return LUNAR_ERR_INVALID_PARAMS;
}

static void pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct lp_client *c = arg;

	(void)p;
	(void)ev;
	c->on_drop(c->drop_arg);
}

void lp_client_on_drop(struct lp_client *c, void (*fn)(void *arg), void *arg)
{
	c->on_drop = fn;
	c->drop_arg = arg;
	nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_gone, c);
}

/*
 * nng 1.5.2's nng_close can hang for good when it races an exchange in
 * flight on the socket (nanomsg/nng#1543 and #1813, fixed after 1.5.2): a
 * proxy stopping while its heartbeat's Ping was out waited there until it
 * was killed. So the close runs on a thread of its own, waited for
 * LP_CLOSE_WAIT_MS at most; one still stuck then is left behind (to end
 * with the process), and whichever of the two sides is last frees k.
 */
#define LP_CLOSE_WAIT_MS 1000

struct closing {
	nng_socket sock;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* on CLOCK_MONOTONIC */
	bool done, abandoned;
};

static void closing_free(struct closing *k)
{
	pthread_cond_destroy(&k->cond);
	pthread_mutex_destroy(&k->lock);
	free(k);
}

static void *close_main(void *arg)
{
	struct closing *k = arg;
	bool abandoned;

	nng_close(k->sock);
	pthread_mutex_lock(&k->lock);
	k->done = true;
	abandoned = k->abandoned;
	pthread_cond_signal(&k->cond);
	pthread_mutex_unlock(&k->lock);
	if (abandoned)
		closing_free(k);
	return NULL;
}

static void close_bounded(nng_socket sock)
{
	struct closing *k = calloc(1, sizeof(*k));
	pthread_condattr_t ca;
	pthread_attr_t attr;
	struct timespec ts;
	pthread_t t;
	bool done;

	if (!k || pthread_condattr_init(&ca)) {
		free(k);
		nng_close(sock);
		return;
	}
	k->sock = sock;
	pthread_mutex_init(&k->lock, NULL);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&k->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, close_main, k)) {
		pthread_attr_destroy(&attr);
		closing_free(k);
		nng_close(sock);
		return;
	}
	pthread_attr_destroy(&attr);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += LP_CLOSE_WAIT_MS / 1000;
	pthread_mutex_lock(&k->lock);
	while (!k->done && pthread_cond_timedwait(&k->cond, &k->lock, &ts) != ETIMEDOUT)
		;
	done = k->done;
	k->abandoned = !done;
	pthread_mutex_unlock(&k->lock);
	if (done)
		closing_free(k);
	else
		LC_WARN("rpc",
			"closing the master connection took over %d ms (nng 1.5.2): "
			"not waiting for it",
			LP_CLOSE_WAIT_MS);
}

/*
 * Closing the socket while another thread closes a context of it panics
 * nng 1.5.2 (a freed mutex, in nng_ctx_close: a proxy's heartbeat, its Ping
 * cut short by a switch to a new leader). So no exchange starts once
 * closed is set, those under way are cancelled, and the socket is closed
 * only once the last has closed its context.
 */
void lp_client_close(struct lp_client *c)
{
	if (!c || atomic_exchange(&c->closed, true))
		return;
	if (c->on_drop) /* no callback may outlive c */
		nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, NULL, NULL);
	pthread_mutex_lock(&c->lock);
	for (struct xchg *x = c->calls; x; x = x->next)
		nng_aio_cancel(x->aio);
	while (c->calls)
		pthread_cond_wait(&c->calls_done, &c->lock);
	pthread_mutex_unlock(&c->lock);
	close_bounded(c->sock);
}

void lp_client_destroy(struct lp_client *c)
{
	if (!c)
		return;
	lp_client_close(c);
	if (c->cur) {
		sodium_memzero(c->cur, sizeof(*c->cur));
		free(c->cur);
	}
	auth_key_wipe(&c->key);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->hs_lock);
	pthread_mutex_destroy(&c->send_lock);
	pthread_cond_destroy(&c->calls_done);
	free(c);
}

static int aio_rc(int rv)
{
	return rv == NNG_ETIMEDOUT ? LUNAR_ERR_RPC_TIMEOUT : LUNAR_ERR_RPC_FAIL;
}

static nng_duration left_ms(uint64_t deadline)
{
	uint64_t now = lc_now_ms();

	return now < deadline ? (nng_duration)(deadline - now) : 0;
}

/* x leaves c->calls; the last to leave a closed client wakes its close. */
static void xchg_leave(struct xchg *x)
{
	struct lp_client *c = x->c;
	struct xchg **pp = &c->calls;

	pthread_mutex_lock(&c->lock);
	while (*pp != x)
		pp = &(*pp)->next;
	*pp = x->next;
	if (!c->calls && atomic_load(&c->closed))
		pthread_cond_broadcast(&c->calls_done);
	pthread_mutex_unlock(&c->lock);
}

/* A context for one exchange, unless c is closed: 0, or a code. */
static int xchg_open(struct lp_client *c, struct xchg *x, uint64_t deadline)
{
	x->c = c;
	x->deadline = deadline;
	if (nng_aio_alloc(&x->aio, NULL, NULL))
		return LUNAR_ERR_INTERNAL;
	pthread_mutex_lock(&c->lock);
	if (atomic_load(&c->closed)) {
		pthread_mutex_unlock(&c->lock);
		nng_aio_free(x->aio);
		return LUNAR_ERR_RPC_FAIL;
	}
	x->next = c->calls;
	c->calls = x;
	pthread_mutex_unlock(&c->lock);
	if (nng_ctx_open(&x->ctx, c->sock)) {
		xchg_leave(x);
		nng_aio_free(x->aio);
		return LUNAR_ERR_RPC_FAIL;
	}
	return 0;
}

static void xchg_close(struct xchg *x)
{
	nng_ctx_close(x->ctx);
	xchg_leave(x);
	nng_aio_free(x->aio);
}

/* Start x's send (send) or receive, unless its client is closed: under
 * the lock lp_client_close cancels under, so none starts after it. */
static int xchg_start(struct xchg *x, bool send)
{
	int rc = 0;

	pthread_mutex_lock(&x->c->lock);
	if (atomic_load(&x->c->closed))
		rc = LUNAR_ERR_RPC_FAIL;
	else if (send)
		nng_ctx_send(x->ctx, x->aio);
	else
		nng_ctx_recv(x->ctx, x->aio);
	pthread_mutex_unlock(&x->c->lock);
	return rc;
}

/* Start sending msg (taken, also on failure): 0, or a code. */
static int xchg_send(struct xchg *x, nng_msg *msg)
{
	nng_aio_set_timeout(x->aio, left_ms(x->deadline));
	nng_aio_set_msg(x->aio, msg);
	if (!xchg_start(x, true))
		return 0;
	nng_aio_set_msg(x->aio, NULL);
	nng_msg_free(msg);
	return LUNAR_ERR_RPC_FAIL;
}

/* Wait for the send, then the reply, by the deadline. */
static int xchg_finish(struct xchg *x, nng_msg **reply)
{
	int rv;

	nng_aio_wait(x->aio);
	rv = nng_aio_result(x->aio);
	if (rv) {
		nng_msg_free(nng_aio_get_msg(x->aio));
		return aio_rc(rv);
	}
	nng_aio_set_timeout(x->aio, left_ms(x->deadline));
	if (xchg_start(x, false))
		return LUNAR_ERR_RPC_FAIL;
	nng_aio_wait(x->aio);
	rv = nng_aio_result(x->aio);
	if (rv)
		return aio_rc(rv);
	*reply = nng_aio_get_msg(x->aio);
	return 0;
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
	nng_msg *msg, *reply = NULL;
	struct xchg x;
	int rc;

	if (nng_msg_alloc(&msg, len))
		return LUNAR_ERR_INTERNAL;
	memcpy(nng_msg_body(msg), buf, len);
	if ((rc = xchg_open(c, &x, deadline))) {
		nng_msg_free(msg);
		return rc;
	}
	rc = xchg_send(&x, msg);
	if (!rc)
		rc = xchg_finish(&x, &reply);
	xchg_close(&x);
	if (rc)
		return rc;
	*rep = reply_of(mt, nng_msg_body(reply), nng_msg_len(reply));
	nng_msg_free(reply);
	return *rep ? 0 : LUNAR_ERR_RPC_FAIL;
}

/* e as a new nng message. */
static int env_msg(const struct lp_env *e, nng_msg **out)
{
	size_t n = lp_env_size(e);

	if (!n || nng_msg_alloc(out, n))
		return LUNAR_ERR_INTERNAL;
	if (lp_env_encode(e, nng_msg_body(*out), n) < 0) {
		nng_msg_free(*out);
		return LUNAR_ERR_INTERNAL;
	}
	return 0;
}

/* One handshake message out, its reply decoded into *r (of kind want)
 * with the reply message in *keep (the caller frees it; r points into it). */
static int hs_step(struct lp_client *c, const struct lp_env *e, uint32_t want, struct lp_env *r,
		   nng_msg **keep, uint64_t deadline)
{
	nng_msg *msg;
	struct xchg x;
	int rc;

	if ((rc = env_msg(e, &msg)))
		return rc;
	if ((rc = xchg_open(c, &x, deadline))) {
		nng_msg_free(msg);
		return rc;
	}
	rc = xchg_send(&x, msg);
	if (!rc)
		rc = xchg_finish(&x, keep);
	xchg_close(&x);
	if (rc)
		return rc;
	if (lp_env_decode(nng_msg_body(*keep), nng_msg_len(*keep), r) || r->kind != want) {
		nng_msg_free(*keep);
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
	nng_msg *keep;
	int rc;

	auth_hs_proof(hs, &c->key, c->role, proof);
	if (auth_hs_finish(hs, &c->key, c->role, &cs->s))
		return LUNAR_ERR_RPC_FAIL;
	cs->sid = sid;
	rc = hs_step(c, &e, LP_KIND_PROOF_REPLY, &r, &keep, deadline);
	if (rc == LUNAR_ERR_RPC_TIMEOUT)
		warn_key(c, "no answer to our proof (a different --cluster-key or role?)");
	if (rc)
		return rc;
	rc = r.sid == sid && !lp_env_tag_check(cs->s.rx_key, &r) ? 0 : LUNAR_ERR_RPC_FAIL;
	nng_msg_free(keep);
	return rc;
}

/* The three messages that open a session (rpc_auth.h). */
static int handshake(struct lp_client *c, uint64_t deadline, struct lp_csess **out)
{
	unsigned char hello[AUTH_HELLO_BYTES];
	struct lp_env e = {.kind = LP_KIND_HELLO, .role = c->role, .hello = hello}, r;
	struct lp_csess *cs;
	struct auth_hs hs;
	nng_msg *keep;
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
	nng_msg_free(keep);
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

/* Send the CALL: its counter is taken and the message queued under
 * send_lock, so counters reach the master about in order and stay inside
 * its 64-counter window however threads are scheduled. */
static int call_send(struct lp_client *c, struct lp_csess *cs, struct lp_env *e, struct xchg *x)
{
	unsigned char tag[AUTH_TAG_BYTES];
	nng_msg *msg;
	int rc;

	e->tag = tag;
	pthread_mutex_lock(&c->send_lock);
	e->ctr = auth_tx_next(&cs->s);
	lp_env_tag(cs->s.tx_key, e, tag);
	rc = env_msg(e, &msg);
	if (!rc)
		rc = xchg_send(x, msg);
	pthread_mutex_unlock(&c->send_lock);
	e->tag = NULL;
	return rc;
}

/* The reply to the CALL numbered ctr: ours, untouched, secrets opened. */
static int call_reply(struct lp_csess *cs, const struct lp_method *mt, uint64_t ctr, nng_msg *reply,
		      ProtobufCMessage **rep)
{
	struct lp_env r;

	if (lp_env_decode(nng_msg_body(reply), nng_msg_len(reply), &r))
		return LUNAR_ERR_RPC_FAIL;
	if (r.kind == LP_KIND_NO_SESSION && r.sid == cs->sid)
		return NO_SESSION;
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
	nng_msg *reply = NULL;
	struct xchg x;
	int rc;

	if ((rc = xchg_open(c, &x, deadline)))
		return rc;
	rc = call_send(c, cs, &e, &x);
	if (!rc)
		rc = xchg_finish(&x, &reply);
	xchg_close(&x);
	if (rc)
		return rc;
	rc = call_reply(cs, mt, e.ctr, reply, rep);
	nng_msg_free(reply);
	return rc;
}

/* A call on the session, opened again once if the master forgot it. */
static int call_keyed(struct lp_client *c, const struct lp_method *mt, const void *buf, size_t len,
		      ProtobufCMessage **rep, uint64_t deadline)
{
	struct lp_csess *cs;
	int rc = NO_SESSION;

	for (int attempt = 0; attempt < 2 && rc == NO_SESSION; attempt++) {
		if ((rc = sess_get(c, deadline, &cs)))
			return rc;
		rc = call_in(c, cs, mt, buf, len, rep, deadline);
		if (rc == NO_SESSION) {
			LC_INFO("rpc", "master does not know our session (restarted?): "
				       "opening a new one");
			sess_drop(c, cs);
		}
		sess_put(c, cs);
	}
	return rc == NO_SESSION ? LUNAR_ERR_RPC_FAIL : rc;
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
