/*
 * leases.c - how the proxy uses its lease cache: the safety margin, and the
 * heartbeat's renewal of leases on keys that are still being read (one
 * BatchExistKey per tenant, which the master answers by extending leases).
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

static int renew_tenant(void *arg, const char *tenant, char **keys, size_t n, int *exists)
{
	struct px_proxy *px = arg;
	const Lunar__BatchCodesReply *codes;
	ProtobufCMessage *rep;
	int rc;

	rc = px_batch_keys_call(px, tenant, LUNAR__METHOD__BATCH_EXIST_KEY, keys, n, &rep);
	if (rc)
		return rc;
	codes = (const Lunar__BatchCodesReply *)rep;
	for (size_t i = 0; i < n; i++)
		exists[i] = i < codes->n_codes && codes->codes[i] == 1;
	protobuf_c_message_free_unpacked(rep, NULL);
	return 0;
}

void px_lease_renew(struct px_proxy *px)
{
	uint64_t ttl = atomic_load(&px->lease_ttl_ms), now = lc_now_ms();

	if (!ttl)
		return;
	/* Renew what would fall out of use before the next heartbeat. */
	px_lease_cache_renew(px->leases, now,
			     px_lease_margin_ms(px) + 2 * px->cfg.ping_interval_ms, now + ttl,
			     renew_tenant, px);
}
