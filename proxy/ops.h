/*
 * ops.h - helpers shared by the proxy's request executors (ops_*.c).
 */
#ifndef LUNAR_PROXY_OPS_H
#define LUNAR_PROXY_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "px_int.h"

/* The items of a request still to do (result == 0), as a batch of keys. */
#define PX_BATCH_INLINE 8 /* up to this many keys, the arrays below are inline */

struct px_batch {
	size_t n;
	char **keys;   /* borrowed from the items */
	uint32_t *idx; /* item index of each key */
	char *keys_in[PX_BATCH_INLINE];
	uint32_t idx_in[PX_BATCH_INLINE];
};

/* px_batch_collect - gather the pending items of r. 0 or -ENOMEM. */
int px_batch_collect(struct px_req *r, struct px_batch *b);
/* px_batch_fini - free what px_batch_collect allocated (the keys stay the
 * items'); b may be finished twice. */
void px_batch_fini(struct px_batch *b);
/* px_batch_fail - set code as the result of every pending item. */
void px_batch_fail(struct px_req *r, const struct px_batch *b, int code);
/*
 * px_batch_keys_call - a BatchKeysRequest method (BATCH_PUT_REVOKE,
 * BATCH_UPSERT_REVOKE, BATCH_GET_REPLICA_LIST) over keys[0..n); late is
 * the request's flag of that name (revokes only), reader the client a
 * lookup is for (its session's client_id; 0 for the proxy's own), or
 * readers[0..n) one per key (NULL: reader for all).
 * Returns 0 and the reply, or a code (RPC failure, or the reply's status).
 */
int px_batch_keys_call(struct px_proxy *px, const char *tenant, uint32_t method, char **keys,
		       size_t n, int late, uint64_t reader, const uint64_t *readers,
		       ProtobufCMessage **rep);
/*
 * px_put_ahead - put r's pending keys ahead (ops_ahead.c) when every one
 * may (a put, one replica, no preferred segment, values up to
 * --reserve-value-max, a piece of reserved space at hand for each): a key
 * done ends with result PX_AHEAD_DONE (success, to be turned into 0 once
 * the two-call path has run), a failed one with its code; keys left
 * pending take the two-call path. Worker thread; blocks on the transfer
 * and one master call.
 */
#define PX_AHEAD_DONE (INT64_MIN + 1)
void px_put_ahead(struct px_proxy *px, struct px_req *r);
/* px_index_committed - HA: note key, just committed from item it of r at
 * the replicas of res, in the proxy's object index, for a new leader
 * (objidx.c); nothing without an index. */
void px_index_committed(struct px_proxy *px, const struct px_req *r, const char *key,
			const struct px_item *it, const Lunar__PutStartResult *res);
/* px_batch_drop_leases - forget cached leases of b's keys (we changed them). */
void px_batch_drop_leases(struct px_proxy *px, struct px_req *r, const struct px_batch *b);

/*
 * The peers one request has given up on. A transfer to a peer that stopped
 * answering fails only when the engine's timeout runs out; once one did, the
 * request moves no more bytes with that peer, so a batch of keys there (or a
 * leased key asked again through the master) waits one timeout, not one per
 * key and attempt. Past PX_DOWN_MAX such peers it tries no remote peer at
 * all, which keeps a request within PX_DOWN_MAX timeouts. On the worker's
 * stack, for one request; zero-initialised.
 */
#define PX_DOWN_MAX 4
#define PX_DOWN_EP  256 /* bytes of an endpoint kept, NUL included */

struct px_down {
	unsigned n;
	char ep[PX_DOWN_MAX][PX_DOWN_EP];
};

/* px_down_has - 1 if the request gave up on the peer at endpoint. */
int px_down_has(const struct px_down *d, const char *endpoint);
/* px_down_add - give up on the peer at endpoint for the rest of the request. */
void px_down_add(struct px_down *d, const char *endpoint);

#endif /* LUNAR_PROXY_OPS_H */
