/*
 * ops.h - helpers shared by the proxy's request executors (ops_*.c).
 */
#ifndef LUNAR_PROXY_OPS_H
#define LUNAR_PROXY_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/px_int.h"

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
void px_batch_fini(struct px_batch *b);
/* px_batch_fail - set code as the result of every pending item. */
void px_batch_fail(struct px_req *r, const struct px_batch *b, int code);
/*
 * px_batch_keys_call - a BatchKeysRequest method (BATCH_PUT_END,
 * BATCH_PUT_REVOKE, BATCH_EXIST_KEY, BATCH_GET_REPLICA_LIST) over keys[0..n).
 * Returns 0 and the reply, or a code (RPC failure, or the reply's status).
 */
int px_batch_keys_call(struct px_proxy *px, const char *tenant, uint32_t method, char **keys,
		       size_t n, ProtobufCMessage **rep);
/* px_batch_drop_leases - forget cached leases of b's keys (we changed them). */
void px_batch_drop_leases(struct px_proxy *px, struct px_req *r, const struct px_batch *b);

#endif /* LUNAR_PROXY_OPS_H */
