/*
 * mc.c - the proxy's master client. Embedded: a direct mst_dispatch call.
 * Remote: nng REQ with one context per call, so calls from many workers are
 * in flight together; resends are off so no call ever runs twice.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "px_int.h"
#include "rpc.h"

struct px_mc {
	struct mst_master *embedded;
	nng_socket sock;
	nng_duration timeout;
	atomic_bool closed;
};

int px_mc_create(struct mst_master *m, const char *url, uint64_t timeout_ms, struct px_mc **out)
{
	struct px_mc *mc = calloc(1, sizeof(*mc));
	int rv;

	if (!mc)
		return LUNAR_ERR_INTERNAL;
	mc->embedded = m;
	mc->timeout = (nng_duration)timeout_ms;
	if (m) {
		*out = mc;
		return 0;
	}
	rv = nng_req0_open(&mc->sock);
	if (rv)
		goto err_free;
	if ((rv = nng_socket_set_ms(mc->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) ||
	    (rv = nng_socket_set_size(mc->sock, NNG_OPT_RECVMAXSZ, LP_MAX_MSG)) ||
	    (rv = nng_socket_set_ms(mc->sock, NNG_OPT_RECONNMAXT, 1000)))
		goto err_close;
	/* Non-blocking dial: the master may come up after us; nng keeps trying. */
	rv = nng_dial(mc->sock, url, NULL, NNG_FLAG_NONBLOCK);
	if (rv)
		goto err_close;
	*out = mc;
	return 0;
err_close:
	nng_close(mc->sock);
err_free:
	LC_ERROR("proxy", "master client for %s: %s", url, nng_strerror(rv));
	free(mc);
	return LUNAR_ERR_INVALID_PARAMS;
}

void px_mc_close(struct px_mc *mc)
{
	if (mc && !mc->embedded && !atomic_exchange(&mc->closed, true))
		nng_close(mc->sock);
}

void px_mc_destroy(struct px_mc *mc)
{
	px_mc_close(mc);
	free(mc);
}

/* nng 1.5 has no synchronous context calls: one aio, waited on. */
static int aio_rc(int rv)
{
	return rv == NNG_ETIMEDOUT ? LUNAR_ERR_RPC_TIMEOUT : LUNAR_ERR_RPC_FAIL;
}

/* The whole exchange, send and receive, within one timeout: a send that
 * waited for the master to come up leaves the receive only what is left. */
static int mc_exchange(nng_duration timeout, nng_ctx ctx, nng_msg *msg, nng_msg **reply)
{
	uint64_t deadline = lc_now_ms() + (uint64_t)timeout;
	uint64_t now;
	nng_aio *aio;
	int rv;

	if (nng_aio_alloc(&aio, NULL, NULL)) {
		nng_msg_free(msg);
		return LUNAR_ERR_INTERNAL;
	}
	nng_aio_set_timeout(aio, timeout);
	nng_aio_set_msg(aio, msg);
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	rv = nng_aio_result(aio);
	if (rv) {
		nng_msg_free(nng_aio_get_msg(aio));
		goto out;
	}
	now = lc_now_ms();
	nng_aio_set_timeout(aio, now < deadline ? (nng_duration)(deadline - now) : 0);
	nng_ctx_recv(ctx, aio);
	nng_aio_wait(aio);
	rv = nng_aio_result(aio);
	if (!rv)
		*reply = nng_aio_get_msg(aio);
out:
	nng_aio_free(aio);
	return rv ? aio_rc(rv) : 0;
}

static int mc_remote(struct px_mc *mc, const struct lp_method *mt, const ProtobufCMessage *req,
		     ProtobufCMessage **rep, nng_duration timeout)
{
	nng_msg *msg, *reply = NULL;
	nng_ctx ctx;
	void *buf;
	size_t len;
	int rc = LUNAR_ERR_RPC_FAIL;

	if (lp_request_pack(mt->id, req, &buf, &len))
		return LUNAR_ERR_INTERNAL;
	if (nng_msg_alloc(&msg, len)) {
		free(buf);
		return LUNAR_ERR_INTERNAL;
	}
	memcpy(nng_msg_body(msg), buf, len);
	free(buf);
	if (nng_ctx_open(&ctx, mc->sock)) {
		nng_msg_free(msg);
		return rc;
	}
	rc = mc_exchange(timeout, ctx, msg, &reply);
	nng_ctx_close(ctx);
	if (rc)
		return rc;
	*rep = lp_reply_unpack(mt, nng_msg_body(reply), nng_msg_len(reply));
	nng_msg_free(reply);
	if (*rep && lp_status(*rep))
		return 0;
	if (*rep)
		protobuf_c_message_free_unpacked(*rep, NULL);
	LC_WARN("proxy", "master sent an undecodable %s reply", mt->name);
	return LUNAR_ERR_RPC_FAIL;
}

int px_mc_call_timed(struct px_mc *mc, uint32_t method, const ProtobufCMessage *req,
		     ProtobufCMessage **rep, uint64_t timeout_ms)
{
	const struct lp_method *mt = lp_method_find(method);

	if (!mt)
		return LUNAR_ERR_INTERNAL;
	if (mc->embedded)
		return mst_dispatch(mc->embedded, method, req, rep) ? LUNAR_ERR_INTERNAL : 0;
	return mc_remote(mc, mt, req, rep, (nng_duration)timeout_ms);
}

int px_mc_call(struct px_mc *mc, uint32_t method, const ProtobufCMessage *req,
	       ProtobufCMessage **rep)
{
	return px_mc_call_timed(mc, method, req, rep, (uint64_t)mc->timeout);
}

int px_mc_code(const ProtobufCMessage *rep)
{
	const Lunar__Status *st = lp_status(rep);

	return st ? st->code : LUNAR_ERR_PROTOCOL;
}
