/*
 * leases.c - how the proxy uses its lease cache: the safety margin, and the
 * heartbeat's renewal of leases on keys that are still being read (one
 * BatchGetReplicaList per tenant: new leases, and the current replica lists,
 * so a value upserted elsewhere replaces the cached one).
 */

#include "clock.h"
#include "lunar.h"
#include "proxy/ops.h"

/* A quarter of the lease, at most 2 s: room for the slowest transfer. */
uint64_t px_lease_margin_ms(struct px_proxy *px)
{
	uint64_t ttl = atomic_load(&px->lease_ttl_ms);

	return ttl / 4 < 2000 ? ttl / 4 : 2000;
}

/* One BatchGetReplicaList for keys: new leases and the current lists. */
static int renew_tenant(void *arg, const char *tenant, char **keys, size_t n,
			struct px_cached *fresh, int *found)
{
	const Lunar__BatchGetReplicaListReply *rl;
	struct px_proxy *px = arg;
	uint64_t sent = lc_now_ms();
	ProtobufCMessage *rep;
	int rc;

	rc = px_batch_keys_call(px, tenant, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, keys, n, 0,
				&rep);
	if (rc)
		return rc;
	rl = (const Lunar__BatchGetReplicaListReply *)rep;
	for (size_t i = 0; i < n; i++) {
		const Lunar__GetReplicaListResult *res = i < rl->n_results ? rl->results[i] : NULL;

		found[i] = res && !res->code &&
			   !px_lease_cache_fill(res, sent + rl->lease_ttl_ms, &fresh[i]);
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	return 0;
}

void px_lease_renew(struct px_proxy *px)
{
	uint64_t ttl = atomic_load(&px->lease_ttl_ms);

	if (!ttl)
		return;
	/* Renew what would fall out of use before the next heartbeat. */
	px_lease_cache_renew(px->leases, lc_now_ms(),
			     px_lease_margin_ms(px) + 2 * px->cfg.ping_interval_ms, renew_tenant, px);
}
