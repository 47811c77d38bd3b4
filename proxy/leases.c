/*
 * leases.c - how the proxy uses its lease cache: the safety margin, the
 * heartbeat's renewal of leases on keys that are still being read (one
 * BatchGetReplicaList per tenant and 128 keys: new leases, each in the name
 * of the key's latest reader, and the current replica lists, so a value
 * upserted elsewhere replaces the cached one), and giving back the leases
 * only a closed client's reads needed, on the beat its close triggers (one
 * BatchLeaseRelease per tenant and 128 keys).
 */

#include <stdlib.h>

#include "clock.h"
#include "lunar.h"
#include "ops.h"

/* A quarter of the lease, at most 2 s: room for the slowest transfer. */
uint64_t px_lease_margin_ms(struct px_proxy *px)
{
	uint64_t ttl = atomic_load(&px->lease_ttl_ms);

	return ttl / 4 < 2000 ? ttl / 4 : 2000;
}

/* One BatchGetReplicaList for keys: new leases, each in the name of the
 * key's latest reader, and the current lists. */
static int renew_tenant(void *arg, const char *tenant, char **keys, const uint64_t *readers,
			size_t n, struct px_cached *fresh, int *found)
{
	const Lunar__BatchGetReplicaListReply *rl;
	struct px_proxy *px = arg;
	uint64_t sent = lc_now_ms();
	ProtobufCMessage *rep;
	int rc;

	rc = px_batch_keys_call(px, tenant, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, keys, n, 0, 0,
				readers, &rep);
	if (rc)
		return rc;
	rl = (const Lunar__BatchGetReplicaListReply *)rep;
	for (size_t i = 0; i < n; i++) {
		const Lunar__GetReplicaListResult *res = i < rl->n_results ? rl->results[i] : NULL;

		found[i] =
		    res && !res->code &&
		    !px_lease_cache_fill(res, sent + rl->lease_ttl_ms, readers[i], &fresh[i]);
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	return 0;
}

void px_lease_renew(struct px_proxy *px)
{
	uint64_t ttl = atomic_load(&px->lease_ttl_ms);

	if (!ttl)
		return;
	/* Renew what would fall out of use before the next heartbeat, for
	 * reads after its grant: a read a margin after it is served from the
	 * cache only while the lease still covers its transfer, and the
	 * renewal it asks for lasts a TTL from now, past the read's own. */
	px_lease_cache_renew(px->leases, lc_now_ms(),
			     px_lease_margin_ms(px) + 2 * px->cfg.ping_interval_ms,
			     px_lease_margin_ms(px), renew_tenant, px);
}

struct px_read px_read_by(struct px_proxy *px, struct px_session *s, uint64_t now_ms)
{
	if (!atomic_load_explicit(&s->leased, memory_order_relaxed))
		atomic_store_explicit(&s->leased, true, memory_order_relaxed);
	return (struct px_read){.reader = s->client_id,
				.until_ms = now_ms + atomic_load(&px->lease_ttl_ms)};
}

void px_lease_reader_gone(struct px_proxy *px, const struct px_session *s)
{
	if (atomic_load(&px->stopping))
		return; /* the heartbeat is done; the leases run out */
	pthread_mutex_lock(&px->hb_lock);
	if (px->ngone == px->gone_cap && px->gone_cap < PX_GONE_MAX) {
		size_t cap = px->gone_cap ? 2 * px->gone_cap : 64;
		uint64_t *v = realloc(px->gone, cap * sizeof(*v));

		if (v) {
			px->gone = v;
			px->gone_cap = cap;
		}
	}
	if (px->ngone < px->gone_cap)
		px->gone[px->ngone++] = s->client_id;
	pthread_mutex_unlock(&px->hb_lock);
	px_heartbeat_kick(px);
}

/* One BatchLeaseRelease; a key the master keeps (another read since) or a
 * failed call leaves its lease to run out. */
static void release_tenant(void *arg, const char *tenant, char **keys, uint64_t *seqs,
			   uint64_t *readers, size_t n)
{
	Lunar__LeaseReleaseRequest rq = LUNAR__LEASE_RELEASE_REQUEST__INIT;
	const Lunar__BatchCodesReply *codes;
	struct px_proxy *px = arg;
	ProtobufCMessage *rep;
	uint64_t released = 0;

	rq.client_id = px->client_id;
	rq.tenant = (char *)tenant;
	rq.n_keys = rq.n_lease_seqs = rq.n_readers = n;
	rq.keys = keys;
	rq.lease_seqs = seqs;
	rq.readers = readers;
	if (px_mc_call(px->mc, LUNAR__METHOD__BATCH_LEASE_RELEASE, &rq.base, &rep))
		return;
	codes = (const Lunar__BatchCodesReply *)rep;
	for (size_t i = 0; !px_mc_code(rep) && i < codes->n_codes; i++)
		released += codes->codes[i] == 0;
	protobuf_c_message_free_unpacked(rep, NULL);
	PX_COUNT(px, leases_released, released);
}

void px_lease_release_gone(struct px_proxy *px)
{
	uint64_t *gone;
	size_t n;

	pthread_mutex_lock(&px->hb_lock);
	gone = px->gone;
	n = px->ngone;
	px->gone = NULL;
	px->ngone = px->gone_cap = 0;
	pthread_mutex_unlock(&px->hb_lock);
	if (n)
		px_lease_cache_orphan(px->leases, gone, n, lc_now_ms(), release_tenant, px);
	free(gone);
}
