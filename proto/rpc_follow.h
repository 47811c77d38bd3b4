/*
 * rpc_follow.h - a master client that follows the leader (SPEC §14), for
 * lunar-proxy and lunar-bench. Given tcp:// or ipc:// it is one rpc_client.
 * Given etcd://h1:2379,h2:2379/C it reads the leader key /lunar/C/leader,
 * dials the leader, and moves to a new one when etcd shows a newer view, when
 * a call is refused by a standby that names another leader, or after the
 * connection drops; a watcher thread reads etcd meanwhile. Every reply whose
 * view is older than the newest this client has seen is dropped: the call
 * fails (LUNAR_ERR_RPC_FAIL) as if no reply came, so a deposed master that
 * wakes up cannot be believed.
 */
#ifndef LUNAR_PROTO_RPC_FOLLOW_H
#define LUNAR_PROTO_RPC_FOLLOW_H

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "auth.h"
#include "rpc.h"
#include "rpc_client.h"

struct lp_follow;

/*
 * lp_follow_create - a client of master: a tcp:// or ipc:// URL, or
 * etcd://HOSTS/CLUSTER. key, role and flags as lp_client_create's (with
 * LP_CLIENT_DIAL_NOW and etcd://, the leader is looked up before returning,
 * and its absence fails). on_switch(arg), if not NULL, is called on the
 * watcher thread (or the calling thread of a refused call) each time the
 * client moved to another master: the caller should re-mount there. 0 and
 * *out, or LUNAR_ERR_INVALID_PARAMS (bad address, no master with
 * LP_CLIENT_DIAL_NOW), LUNAR_ERR_INTERNAL.
 */
int lp_follow_create(const char *master, const struct auth_key *key, uint32_t role, unsigned flags,
		     void (*on_switch)(void *arg), void *arg, struct lp_follow **out);
/*
 * lp_follow_call - lp_client_call on the current leader, within timeout_ms
 * in all. A call refused with UNAVAILABLE_IN_CURRENT_STATUS (it did not run)
 * is sent again to the leader the refusal or etcd names while time is left;
 * other failures are returned (the call may have run). With no leader known
 * it waits for one up to the deadline. Thread-safe; codes as
 * lp_client_call's, plus the refusal's reply when time ran out; as there,
 * *rep is set only on 0 (a stale leader's reply or a refusal tried again
 * is freed here, never left behind).
 */
int lp_follow_call(struct lp_follow *f, const struct lp_method *mt, const ProtobufCMessage *req,
		   ProtobufCMessage **rep, uint64_t timeout_ms);
/* lp_follow_view - the newest view seen (etcd or replies); 0 without HA. */
uint64_t lp_follow_view(const struct lp_follow *f);
/* lp_follow_switches - how many times the client moved to another master. */
uint64_t lp_follow_switches(const struct lp_follow *f);
/* lp_follow_close - fail every call in flight or to come (shutdown), stop
 * following. Idempotent, thread-safe. */
void lp_follow_close(struct lp_follow *f);
/* lp_follow_destroy - close and free; no call may be running. NULL is a no-op. */
void lp_follow_destroy(struct lp_follow *f);

#endif /* LUNAR_PROTO_RPC_FOLLOW_H */
