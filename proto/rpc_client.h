/*
 * rpc_client.h - the one client of the master RPC, shared by lunar-proxy
 * (proxy/mc.c) and lunar-bench --master: nng's REQ wire (sp_req.h), each
 * call exchanged by its own thread on a pooled connection, never sent
 * twice unless the master answered that it did not run it. With a cluster
 * key it opens an authenticated session (rpc_auth.h) on the first call and
 * again whenever the master no longer knows it (a master restart), and
 * sends a call again with a new counter when the master answers STALE (it
 * arrived behind too many later ones), transparently.
 */
#ifndef LUNAR_PROTO_RPC_CLIENT_H
#define LUNAR_PROTO_RPC_CLIENT_H

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "auth.h"
#include "rpc.h"

struct lp_client;

/* lp_client_create's flags: dial before returning, failing at once when no
 * master listens (a tool), instead of at the first call (a daemon). */
#define LP_CLIENT_DIAL_NOW 1u

/*
 * lp_client_create - a client of the master at url (tcp://HOST:PORT or
 * ipc://PATH), dialled by the first call (which tries again until its
 * deadline: the master may come up later) unless flags has
 * LP_CLIENT_DIAL_NOW. key: the
 * cluster key (copied; NULL: the keyless plain protocol); role: the
 * auth_role the session claims (NODE or ADMIN; ignored keyless). 0 and *out,
 * or LUNAR_ERR_INVALID_PARAMS (bad url, no master with LP_CLIENT_DIAL_NOW,
 * or a role a client may not claim). Blocks only with LP_CLIENT_DIAL_NOW.
 */
int lp_client_create(const char *url, const struct auth_key *key, uint32_t role, unsigned flags,
		     struct lp_client **out);
/*
 * lp_client_call - one call of method mt, blocking up to timeout_ms for the
 * whole exchange (handshake included). Thread-safe: any number of threads
 * may call at once. On 0, *rep is a reply with a Status (free with
 * protobuf_c_message_free_unpacked(*rep, NULL)) whose segment secrets are
 * plain; else *rep is untouched and the code is LUNAR_ERR_RPC_TIMEOUT,
 * LUNAR_ERR_RPC_FAIL (no or an undecodable or unauthentic reply),
 * LUNAR_ERR_UNAUTHORIZED (the master does not hold our cluster key) or
 * LUNAR_ERR_INTERNAL.
 */
int lp_client_call(struct lp_client *c, const struct lp_method *mt, const ProtobufCMessage *req,
		   ProtobufCMessage **rep, uint64_t timeout_ms);
/*
 * lp_client_on_drop - call fn(arg), on a calling thread, each time a
 * connection to the master is found closed (it died or restarted: a call
 * broke on it, or the next call found it shut). fn must not block or call
 * into c. Call once, before the first call.
 */
void lp_client_on_drop(struct lp_client *c, void (*fn)(void *arg), void *arg);
/*
 * lp_client_close - fail every call in flight or to come at once
 * (shutdown), returning once those in flight have. Idempotent and
 * thread-safe; lp_client_destroy still frees.
 */
void lp_client_close(struct lp_client *c);
/* lp_client_destroy - close, wipe the key, free. No call may be running. NULL is a no-op. */
void lp_client_destroy(struct lp_client *c);

#endif /* LUNAR_PROTO_RPC_CLIENT_H */
