/*
 * lease_cache.h - replica lists the proxy may reuse without asking the
 * master. A read lease guarantees an object's replicas stay where they are
 * until its deadline, so while the lease holds, exists and get of that key
 * cost no master round trip. Forced removes and upserts elsewhere bypass
 * leases; the reader's CRC32C check catches a stale list, drops the entry
 * and goes back to the master.
 */
#ifndef LUNAR_PROXY_LEASE_CACHE_H
#define LUNAR_PROXY_LEASE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "lunar.pb-c.h"

#define PX_CACHE_MAX_REPLICAS 8
#define PX_ENDPOINT_MAX	      72

struct px_cached_replica {
	int type; /* Lunar__ReplicaType */
	char endpoint[PX_ENDPOINT_MAX];
	uint64_t offset;
	uint64_t length;
	int has_cap;	    /* the master granted cap (keyed; keyless a mount) */
	struct eng_cap cap; /* expires with the lease: the cache stops serving then */
};

struct px_cached {
	uint64_t size;
	uint32_t crc;
	uint64_t deadline_ms; /* lease deadline on our monotonic clock */
	uint64_t lease_seq;   /* the number of the master's grant; 0 unknown */
	uint64_t lessee;      /* the reader that grant named */
	bool landing;	      /* the master's word: its bytes may not have landed yet
			       * (never kept in the cache) */
	unsigned nrep;
	struct px_cached_replica rep[PX_CACHE_MAX_REPLICAS];
};

struct px_lease_cache;

/* One entry per this many bytes of the proxy's segment, so that a segment
 * full of small objects can have all of them read from the cache; within
 * [PX_LEASE_KEYS_MIN, PX_LEASE_KEYS_MAX]. Entries also take at most
 * PX_LEASE_ENTRY_BYTES each on average (one replica and a 40-byte key of
 * tenant "default" take about 270, 320 with a keyed cluster's capability):
 * long keys or many replicas make room for fewer. So the cache takes at most 2 % of the segment,
 * and 1.25 GiB at the most keys. */
#define PX_LEASE_BYTES_PER_KEY (16u << 10)
#define PX_LEASE_KEYS_MIN      65536u
#define PX_LEASE_KEYS_MAX      (4u << 20)
#define PX_LEASE_ENTRY_BYTES   320u
/* px_lease_cache_default_keys - the capacity for a segment of that size. */
unsigned px_lease_cache_default_keys(uint64_t segment_size);
/* px_lease_cache_create - room for about capacity keys, and entries of
 * capacity * PX_LEASE_ENTRY_BYTES bytes in all. NULL on ENOMEM. */
struct px_lease_cache *px_lease_cache_create(unsigned capacity);
/* px_lease_cache_destroy - free c and every entry; NULL is a no-op. No other
 * call on c may be running. */
void px_lease_cache_destroy(struct px_lease_cache *c);

/*
 * A read by one of the proxy's clients: who (the session's id, never 0) and
 * until when the lease must hold for it (the read's time plus the lease
 * TTL). An entry remembers its latest reader and, folded into one deadline,
 * what the reads of every other reader need: when a reader is gone and no
 * other needs the lease any more, the proxy can give it back at once
 * (px_lease_cache_orphan). An entry dropped while a read still needed it
 * leaves that need to the next entry of its shard (the key may come back).
 * Leases from the master are per reader too (its lookups name the session),
 * so one reader's lookup still in flight keeps its own lease whatever the
 * cache holds.
 */
struct px_read {
	uint64_t reader;
	uint64_t until_ms;
	uint64_t mark; /* px_lease_cache_mark before the master was asked; 0 none */
};

/*
 * px_lease_cache_get - copy the entry of (tenant, key) into *out if its
 * lease holds past now_ms + margin_ms, and note the read rd (so the
 * heartbeat renews it). Returns 1 on a hit, 0 on a miss. Any thread.
 */
int px_lease_cache_get(struct px_lease_cache *c, const char *tenant, const char *key,
		       uint64_t now_ms, uint64_t margin_ms, const struct px_read *rd,
		       struct px_cached *out);
/*
 * px_replica_cap - the grant of a replica message (untrusted bytes from
 * the master) into *out: 1 when it has a capability of ENG_CAP_BYTES, or
 * keyless a mount (its only part then), else 0 (pass NULL to the engine
 * then). Any thread.
 */
int px_replica_cap(const Lunar__Replica *rp, struct eng_cap *out);
/* px_lease_cache_fill - convert a master result, granted to lessee, into
 * *out: its first PX_CACHE_MAX_REPLICAS replicas whose endpoints fit (any
 * one serves a read; the bytes are checked against the CRC32C). 0, or -1
 * when it named replicas and none fits. */
int px_lease_cache_fill(const Lunar__GetReplicaListResult *res, uint64_t deadline_ms,
			uint64_t lessee, struct px_cached *out);
/* px_lease_cache_put - insert or replace the entry of (tenant, key), which
 * the master just gave for the read rd; a landing one drops it instead.
 * Not kept when rd has a mark and a clear, or a drop of a key that shares
 * its shard (one in 64), came since: the list may be of the value an
 * upsert here replaced. */
void px_lease_cache_put(struct px_lease_cache *c, const char *tenant, const char *key,
			const struct px_cached *e, const struct px_read *rd);
/* px_lease_cache_mark - where the drops and clears stand, nonzero: taken
 * before asking the master, so that a list it gives is not kept once one
 * of its shard came between (struct px_read's mark; renewals take theirs). */
uint64_t px_lease_cache_mark(struct px_lease_cache *c);
/* px_lease_cache_drop - forget (tenant, key). */
void px_lease_cache_drop(struct px_lease_cache *c, const char *tenant, const char *key);
/* px_lease_cache_clear - forget every key of tenant (NULL: of every tenant). */
void px_lease_cache_clear(struct px_lease_cache *c, const char *tenant);

/*
 * px_lease_cache_renew - for every entry read since its last renewal whose
 * lease ends before now_ms + window_ms, and whose reads need it more than
 * slack_ms past its end (a read the lease covers asks for no renewal: a
 * key read once stays leased one TTL, as in Mooncake), call renew(arg, tenant, keys,
 * readers, n, fresh, found) once per tenant with up to PX_RENEW_BATCH keys
 * and the latest reader of each (the lease is renewed in its name, so that
 * it goes back with that reader's others); renew asks the master again and
 * sets found[i] with the new entry in fresh[i] (which replaces the cached
 * one: an upsert elsewhere is picked up here; a landing one drops it), or
 * found[i] = 0 (dropped).
 * A nonzero return (master unreachable) leaves the entries to run out their
 * leases. Entries not read are left to expire, and so are those whose
 * lease has ended: only entries whose lease still runs are visited (newest
 * grant first, up to the first that has ended). Heartbeat thread; renew is
 * called without cache locks held.
 */
#define PX_RENEW_BATCH 128
typedef int (*px_lease_renew_fn)(void *arg, const char *tenant, char **keys,
				 const uint64_t *readers, size_t n, struct px_cached *fresh,
				 int *found);
void px_lease_cache_renew(struct px_lease_cache *c, uint64_t now_ms, uint64_t window_ms,
			  uint64_t slack_ms, px_lease_renew_fn renew, void *arg);

/*
 * px_lease_cache_orphan - the readers gone[0..n) (sorted here, in place)
 * will read no more: forget their reads. Each entry one of them read last
 * whose lease still runs after now_ms, granted to that reader itself, and
 * no other read needs leaves the cache, and release(arg, tenant, keys,
 * seqs, readers, k) is called once per tenant with up to PX_RENEW_BATCH of
 * them, the lease_seq each was cached with and its reader, so the caller
 * can give those leases back. A grant to another reader is never given
 * back for a gone one: at the master it continues that reader's run, whose
 * lookups may be in flight. Only entries whose lease still runs are
 * visited (newest grant first, up to the first that has ended): the others
 * have nothing to give back. Heartbeat thread; release is called without
 * cache locks held.
 */
typedef void (*px_lease_release_fn)(void *arg, const char *tenant, char **keys, uint64_t *seqs,
				    uint64_t *readers, size_t n);
void px_lease_cache_orphan(struct px_lease_cache *c, uint64_t *gone, size_t n, uint64_t now_ms,
			   px_lease_release_fn release, void *arg);

#endif /* LUNAR_PROXY_LEASE_CACHE_H */
