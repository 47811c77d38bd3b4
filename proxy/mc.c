/*
 * mc.c - the proxy's master client. Embedded: a direct mst_dispatch call.
 * Remote: the shared RPC client (proto/rpc_follow.h, one rpc_client.h for
 * a tcp:// master, the etcd leader for etcd://), authenticated when the
 * proxy has a cluster key. A remote master whose last Ping (the
 * heartbeat's) went unanswered is down: other calls then fail at once
 * instead of each waiting out the RPC timeout, until a Ping is answered.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "lunar.h"
#include "px_int.h"
#include "rpc.h"
#include "rpc_follow.h"

struct px_mc {
	struct mst_master *embedded;
	struct lp_follow *remote;
	uint64_t timeout_ms;
	atomic_bool down; /* the last Ping got no answer; never set when embedded */
};

int px_mc_follow(const char *url, uint64_t timeout_ms, const struct auth_key *key, uint32_t role,
		 void (*on_switch)(void *arg), void *arg, struct px_mc **out)
{
	struct px_mc *mc = calloc(1, sizeof(*mc));
	int rc;

	if (!mc)
		return LUNAR_ERR_INTERNAL;
	mc->timeout_ms = timeout_ms;
	if ((rc = lp_follow_create(url, key, role, 0, on_switch, arg, &mc->remote))) {
		free(mc);
		return rc;
	}
	*out = mc;
	return 0;
}

int px_mc_create(struct mst_master *m, const char *url, uint64_t timeout_ms,
		 const struct auth_key *key, uint32_t role, struct px_mc **out)
{
	struct px_mc *mc;

	if (!m)
		return px_mc_follow(url, timeout_ms, key, role, NULL, NULL, out);
	if (!(mc = calloc(1, sizeof(*mc))))
		return LUNAR_ERR_INTERNAL;
	mc->embedded = m;
	mc->timeout_ms = timeout_ms;
	*out = mc;
	return 0;
}

uint64_t px_mc_view(struct px_mc *mc)
{
	return mc->remote ? lp_follow_view(mc->remote) : 0;
}

void px_mc_close(struct px_mc *mc)
{
	if (mc && mc->remote)
		lp_follow_close(mc->remote);
}

void px_mc_destroy(struct px_mc *mc)
{
	if (!mc)
		return;
	lp_follow_destroy(mc->remote);
	free(mc);
}

int px_mc_call_timed(struct px_mc *mc, uint32_t method, const ProtobufCMessage *req,
		     ProtobufCMessage **rep, uint64_t timeout_ms)
{
	const struct lp_method *mt = lp_method_find(method);
	int rc;

	if (!mt)
		return LUNAR_ERR_INTERNAL;
	if (mc->embedded)
		return mst_dispatch(mc->embedded, method, req, rep) ? LUNAR_ERR_INTERNAL : 0;
	if (method != LUNAR__METHOD__PING) {
		if (atomic_load_explicit(&mc->down, memory_order_relaxed))
			return LUNAR_ERR_RPC_FAIL;
		return lp_follow_call(mc->remote, mt, req, rep, timeout_ms);
	}
	rc = lp_follow_call(mc->remote, mt, req, rep, timeout_ms);
	/* Only a master that did not answer is down; one that refused our key
	 * answers every call with that. */
	atomic_store_explicit(&mc->down, rc == LUNAR_ERR_RPC_FAIL || rc == LUNAR_ERR_RPC_TIMEOUT,
			      memory_order_relaxed);
	return rc;
}

int px_mc_call(struct px_mc *mc, uint32_t method, const ProtobufCMessage *req,
	       ProtobufCMessage **rep)
{
	return px_mc_call_timed(mc, method, req, rep, mc->timeout_ms);
}

int px_mc_code(const ProtobufCMessage *rep)
{
	const Lunar__Status *st = lp_status(rep);

	return st ? st->code : LUNAR_ERR_PROTOCOL;
}
